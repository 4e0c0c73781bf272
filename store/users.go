package store

import (
	"context"
	"encoding/json"
	"time"
)

// User is an external user (ExternalID set) or an internal user (InternalID
// set) of an account.
type User struct {
	ID          int64
	AccountID   int64
	ExternalID  string
	InternalID  string
	Email       string
	DisplayName string
	Picture     string
	// SecurityContext is the JSON object last supplied, or nil.
	SecurityContext json.RawMessage
	// Ephemeral users do not count toward the limit and disappear at
	// ExpiresAt; ExpiresAt is zero for persistent users.
	Ephemeral bool
	ExpiresAt time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ExternalUserUpsert describes the provisioning of an external user. Nil
// pointer fields preserve the stored value; non-nil ones overwrite it.
type ExternalUserUpsert struct {
	AccountID       int64
	ExternalID      string
	Email           *string
	DisplayName     *string
	Picture         *string
	SecurityContext json.RawMessage // nil preserves; otherwise a JSON object

	// Persistent true makes the user persistent (created so, or converted
	// from ephemeral); such a user counts toward MaxUsers. Persistent false
	// creates an ephemeral user expiring at EphemeralExpiresAt, and leaves an
	// existing user (persistent or ephemeral) as it is in that respect.
	Persistent         bool
	EphemeralExpiresAt time.Time
	// MaxUsers is the account's limit of persistent external users; 0 or
	// less means no limit.
	MaxUsers int
	Now      time.Time
	// NotReturning tells UpsertExternalUser that a Lookup of the same
	// transaction, whose ReturningUser was this upsert, reported
	// UserUpdated false: there is no returning user to update, so the
	// adapter may skip trying. Leave it false in any other case.
	NotReturning bool
	// InsertFirst tells UpsertExternalUser that the caller expects no user
	// with this external id (it found none just before), so the adapter
	// may try creating the user before looking for an existing one. It is
	// a hint: the result is the same as without it (an existing user is
	// still found and updated, an expired ephemeral one replaced), only
	// cheaper when the user is new.
	InsertFirst bool
}

// AttributeValue is the value of one attribute for a user. A nil Value
// clears it. Value is the JSON of a string, number, string array or number
// array, already checked against the definition's type.
type AttributeValue struct {
	AttributeID int64
	Value       json.RawMessage
}

// UserAttribute is a stored attribute value with its definition's name and
// type, as handed to agents and shown by whoami.
type UserAttribute struct {
	Name  string
	Type  AttributeType
	Value json.RawMessage
}

// Users reads and writes users, their attribute values and memberships.
type Users interface {
	// UpsertExternalUser creates or updates the user keyed by (AccountID,
	// ExternalID) and returns it. An ephemeral user whose expiry has passed
	// at u.Now is treated as absent: it is deleted with everything it owns and
	// a new user is created. Creating a persistent user, or converting an
	// ephemeral one, when the account already has u.MaxUsers persistent
	// external users returns [ErrLimit]; this is exact under concurrency.
	// Simultaneous first calls for one ExternalID yield one user.
	UpsertExternalUser(ctx context.Context, u ExternalUserUpsert) (User, error)
	// UserByExternalID returns [ErrNotFound] when missing or when an
	// ephemeral user has expired at now.
	UserByExternalID(ctx context.Context, accountID int64, externalID string, now time.Time) (User, error)
	// UserByID is UserByExternalID by the user's ID (external or internal).
	UserByID(ctx context.Context, id int64, now time.Time) (User, error)

	// SaveInternalUser creates the internal user if missing. Idempotent.
	SaveInternalUser(ctx context.Context, accountID int64, username string) (User, error)
	// InternalUser returns [ErrNotFound] when missing.
	InternalUser(ctx context.Context, accountID int64, username string) (User, error)

	// SetAttributeValues overwrites the values of the named attributes for
	// the user (nil Value deletes). At most one statement for the values set
	// and one for those cleared. AttributeIDs must be distinct.
	SetAttributeValues(ctx context.Context, userID int64, values []AttributeValue) error
	// AttributeValues returns the user's values of attributes of scope s,
	// ordered by name.
	AttributeValues(ctx context.Context, userID int64, s Scope) ([]UserAttribute, error)

	// ReplaceMemberships makes groupIDs exactly the user's groups within
	// scope s; memberships in other scopes are untouched. An empty groupIDs
	// clears them. Bounded statements: one delete, one batched insert.
	ReplaceMemberships(ctx context.Context, userID int64, s Scope, groupIDs []int64) error
	// Memberships returns the user's groups within scope s, ordered by name.
	Memberships(ctx context.Context, userID int64, s Scope) ([]Group, error)

	// DeleteUser deletes a user with its attribute values, memberships,
	// sessions, tokens and chat threads. Missing: [ErrNotFound].
	DeleteUser(ctx context.Context, userID int64) error
	// DeleteUnusedUser deletes the user when its CreatedAt is createdAt and
	// it owns no thread, session or token, with its attribute values and
	// memberships, and reports whether it did (false, nil when it is
	// missing or in use). It undoes a user that a refused request created
	// without taking it from a concurrent request that uses it: a
	// transaction that gives the user a thread or session either commits
	// first (the user stays) or finds the user gone.
	DeleteUnusedUser(ctx context.Context, userID int64, createdAt time.Time) (bool, error)
	// DeleteExpiredUsers deletes at most limit ephemeral users expired at now,
	// with everything they own, and returns how many it deleted. Safe to run
	// from several processes at once.
	DeleteExpiredUsers(ctx context.Context, now time.Time, limit int) (int, error)
}
