package store

import (
	"context"
	"time"
)

// DefaultEmbedTenant is the name of the embed tenant used when a request
// names none.
const DefaultEmbedTenant = "default"

// EmbedTenant is a named scope inside an account with its own groups and
// attribute definitions. It is created on first use.
type EmbedTenant struct {
	ID        int64
	AccountID int64
	Name      string
	CreatedAt time.Time
}

// Scope selects a catalog: the account's tenant-wide catalog when
// EmbedTenantID is 0, else the embed tenant's scoped catalog.
type Scope struct {
	AccountID     int64
	EmbedTenantID int64
}

// TenantWide returns the tenant-wide scope of an account.
func TenantWide(accountID int64) Scope { return Scope{AccountID: accountID} }

// Group is a group definition of a scope.
type Group struct {
	ID          int64
	Scope       Scope
	Name        string
	Description string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// GroupDef asks for a group to exist. A nil Description leaves the stored one
// unchanged; descriptions are never cleared.
type GroupDef struct {
	Name        string
	Description *string
}

// AttributeType is the type of an attribute's values.
type AttributeType string

// The four attribute types of the spec.
const (
	TypeString      AttributeType = "string"
	TypeNumber      AttributeType = "number"
	TypeStringArray AttributeType = "string_array"
	TypeNumberArray AttributeType = "number_array"
)

// Valid reports whether t is one of the four attribute types.
func (t AttributeType) Valid() bool {
	switch t {
	case TypeString, TypeNumber, TypeStringArray, TypeNumberArray:
		return true
	}
	return false
}

// Attribute is an attribute definition of a scope.
type Attribute struct {
	ID           int64
	Scope        Scope
	Name         string
	Type         AttributeType
	DisplayName  string
	DefaultValue string
	Description  string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// AttributeDef asks for an attribute to exist. Nil optional fields leave the
// stored values unchanged.
type AttributeDef struct {
	Name         string
	Type         AttributeType
	DisplayName  *string
	DefaultValue *string
	Description  *string
}

// Catalog reads and writes embed tenants, groups and attribute definitions.
type Catalog interface {
	// EnsureEmbedTenant returns the embed tenant named name, creating it on
	// first use. Simultaneous calls yield one tenant. When max is above zero
	// and the account already has max embed tenants, creating one more is
	// [ErrLimit] and changes nothing; this is exact under concurrency (an
	// existing tenant is returned whatever the count).
	EnsureEmbedTenant(ctx context.Context, accountID int64, name string, max int) (EmbedTenant, error)
	// EmbedTenantByName returns [ErrNotFound] when missing.
	EmbedTenantByName(ctx context.Context, accountID int64, name string) (EmbedTenant, error)

	// UpsertDefinitions creates the missing groups and attributes of s and
	// updates existing ones: a group's description, an attribute's display
	// name, default value and description, where the definition gives a
	// non-nil value (nil keeps the stored one). It never changes the type of
	// an existing attribute: callers compare types first (see [Lookup]) and
	// treat a difference as a conflict. Names are distinct within each
	// slice; either slice may be empty. Idempotent.
	UpsertDefinitions(ctx context.Context, s Scope, groups []GroupDef, attrs []AttributeDef) error

	// Lookup resolves what a provisioning request names, as documented on
	// [Lookup]. It only reads.
	Lookup(ctx context.Context, l Lookup) (LookupResult, error)

	// ListGroups returns at most limit groups of s with ID greater than
	// afterID, in increasing ID order (keyset pagination).
	ListGroups(ctx context.Context, s Scope, afterID int64, limit int) ([]Group, error)
	// ListAttributes is ListGroups for attribute definitions.
	ListAttributes(ctx context.Context, s Scope, afterID int64, limit int) ([]Attribute, error)

	// DeleteGroup deletes a group of s; users lose their membership of it
	// (no later read shows it, and a group created afterwards, whatever its
	// name, has a new ID that no user is a member of). A group of another
	// scope, or a missing one, is [ErrNotFound].
	DeleteGroup(ctx context.Context, s Scope, id int64) error
	// DeleteAttribute deletes an attribute of s; users lose their value of
	// it, as for DeleteGroup. A definition of another scope, or a missing
	// one, is [ErrNotFound].
	DeleteAttribute(ctx context.Context, s Scope, id int64) error
}
