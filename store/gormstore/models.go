package gormstore

import (
	"encoding/json"

	"github.com/embedkit/embedkit/store"
)

// Row structs: what a SELECT or RETURNING list scans into, field by field in
// the order of the matching column list constant (dest). Times are Unix
// nanoseconds; nullable columns are pointers. None of these leave the package.

const accountCols = "id, name, plan, use_creator_mode, max_external_users, branches, limits"

type accountRow struct {
	ID               int64
	Name             string
	Plan             string
	UseCreatorMode   bool
	MaxExternalUsers int64
	Branches         string
	Limits           string
}

func (r *accountRow) dest() []any {
	return []any{&r.ID, &r.Name, &r.Plan, &r.UseCreatorMode, &r.MaxExternalUsers, &r.Branches, &r.Limits}
}

func (r accountRow) account() store.Account {
	a := store.Account{
		ID:               r.ID,
		Name:             r.Name,
		Plan:             store.Plan(r.Plan),
		UseCreatorMode:   r.UseCreatorMode,
		MaxExternalUsers: int(r.MaxExternalUsers),
	}
	if r.Branches != "" && r.Branches != "[]" && r.Branches != "null" {
		_ = json.Unmarshal([]byte(r.Branches), &a.Branches) // written by SaveAccount
	}
	if r.Limits != "" && r.Limits != "{}" {
		_ = json.Unmarshal([]byte(r.Limits), &a.Limits) // written by SaveAccount
	}
	return a
}

type deploymentRow struct {
	AccountID int64
	ID        int64
	Name      string
}

func (r *deploymentRow) dest() []any {
	return []any{&r.AccountID, &r.ID, &r.Name}
}

type agentRow struct {
	AccountID    int64
	ID           string
	DeploymentID int64
}

func (r *agentRow) dest() []any {
	return []any{&r.AccountID, &r.ID, &r.DeploymentID}
}

const userCols = "id, account_id, external_id, internal_id, email, display_name, picture, security_context, ephemeral, expires_at, created_at, updated_at"

type userRow struct {
	ID              int64
	AccountID       int64
	ExternalID      *string
	InternalID      *string
	Email           string
	DisplayName     string
	Picture         string
	SecurityContext *string
	Ephemeral       bool
	ExpiresAt       *int64
	CreatedAt       int64
	UpdatedAt       int64
}

func (r *userRow) dest() []any {
	return []any{&r.ID, &r.AccountID, &r.ExternalID, &r.InternalID, &r.Email, &r.DisplayName, &r.Picture, &r.SecurityContext, &r.Ephemeral, &r.ExpiresAt, &r.CreatedAt, &r.UpdatedAt}
}

func (r userRow) user() store.User {
	u := store.User{
		ID:          r.ID,
		AccountID:   r.AccountID,
		Email:       r.Email,
		DisplayName: r.DisplayName,
		Picture:     r.Picture,
		Ephemeral:   r.Ephemeral,
		ExpiresAt:   fromNanosPtr(r.ExpiresAt),
		CreatedAt:   fromNanos(r.CreatedAt),
		UpdatedAt:   fromNanos(r.UpdatedAt),
	}
	if r.ExternalID != nil {
		u.ExternalID = *r.ExternalID
	}
	if r.InternalID != nil {
		u.InternalID = *r.InternalID
	}
	if r.SecurityContext != nil {
		u.SecurityContext = json.RawMessage(*r.SecurityContext)
	}
	return u
}

type userAttributeRow struct {
	Name  string
	Type  string
	Value string
}

func (r *userAttributeRow) dest() []any {
	return []any{&r.Name, &r.Type, &r.Value}
}

const tenantCols = "id, account_id, name, created_at"

type tenantRow struct {
	ID        int64
	AccountID int64
	Name      string
	CreatedAt int64
}

func (r *tenantRow) dest() []any {
	return []any{&r.ID, &r.AccountID, &r.Name, &r.CreatedAt}
}

func (r tenantRow) tenant() store.EmbedTenant {
	return store.EmbedTenant{ID: r.ID, AccountID: r.AccountID, Name: r.Name, CreatedAt: fromNanos(r.CreatedAt)}
}

const groupCols = "id, account_id, embed_tenant_id, name, COALESCE(description, '') AS description, created_at, updated_at"

type groupRow struct {
	ID            int64
	AccountID     int64
	EmbedTenantID int64
	Name          string
	Description   string
	CreatedAt     int64
	UpdatedAt     int64
}

func (r *groupRow) dest() []any {
	return []any{&r.ID, &r.AccountID, &r.EmbedTenantID, &r.Name, &r.Description, &r.CreatedAt, &r.UpdatedAt}
}

func (r groupRow) group() store.Group {
	return store.Group{
		ID:          r.ID,
		Scope:       store.Scope{AccountID: r.AccountID, EmbedTenantID: r.EmbedTenantID},
		Name:        r.Name,
		Description: r.Description,
		CreatedAt:   fromNanos(r.CreatedAt),
		UpdatedAt:   fromNanos(r.UpdatedAt),
	}
}

func groups(rows []groupRow) []store.Group {
	out := make([]store.Group, len(rows))
	for i, r := range rows {
		out[i] = r.group()
	}
	return out
}

const attributeCols = "id, account_id, embed_tenant_id, name, type, COALESCE(display_name, '') AS display_name, " +
	"COALESCE(default_value, '') AS default_value, COALESCE(description, '') AS description, created_at, updated_at"

type attributeRow struct {
	ID            int64
	AccountID     int64
	EmbedTenantID int64
	Name          string
	Type          string
	DisplayName   string
	DefaultValue  string
	Description   string
	CreatedAt     int64
	UpdatedAt     int64
}

func (r *attributeRow) dest() []any {
	return []any{&r.ID, &r.AccountID, &r.EmbedTenantID, &r.Name, &r.Type, &r.DisplayName, &r.DefaultValue, &r.Description, &r.CreatedAt, &r.UpdatedAt}
}

func (r attributeRow) attribute() store.Attribute {
	return store.Attribute{
		ID:           r.ID,
		Scope:        store.Scope{AccountID: r.AccountID, EmbedTenantID: r.EmbedTenantID},
		Name:         r.Name,
		Type:         store.AttributeType(r.Type),
		DisplayName:  r.DisplayName,
		DefaultValue: r.DefaultValue,
		Description:  r.Description,
		CreatedAt:    fromNanos(r.CreatedAt),
		UpdatedAt:    fromNanos(r.UpdatedAt),
	}
}

func attributes(rows []attributeRow) []store.Attribute {
	out := make([]store.Attribute, len(rows))
	for i, r := range rows {
		out[i] = r.attribute()
	}
	return out
}

const grantCols = "account_id, user_id, deployment_id, embed_tenant_id, embed_tenant_name, creator_mode, created_at, expires_at, key_hash"

// grantRow is the grant a session id or a token carries.
type grantRow struct {
	AccountID       int64
	UserID          int64
	DeploymentID    int64
	EmbedTenantID   int64
	EmbedTenantName string
	CreatorMode     bool
	CreatedAt       int64
	ExpiresAt       int64
	KeyHash         []byte
}

func (r *grantRow) dest() []any {
	return []any{&r.AccountID, &r.UserID, &r.DeploymentID, &r.EmbedTenantID, &r.EmbedTenantName, &r.CreatorMode, &r.CreatedAt, &r.ExpiresAt, &r.KeyHash}
}

func (r grantRow) session() store.Session {
	return store.Session{
		AccountID:       r.AccountID,
		UserID:          r.UserID,
		DeploymentID:    r.DeploymentID,
		EmbedTenantID:   r.EmbedTenantID,
		EmbedTenantName: r.EmbedTenantName,
		CreatorMode:     r.CreatorMode,
		CreatedAt:       fromNanos(r.CreatedAt),
		ExpiresAt:       fromNanos(r.ExpiresAt),
		KeyHash:         r.KeyHash,
	}
}

const threadCols = "account_id, chat_id, agent_id, user_id, last_sort, created_at, updated_at"

type threadRow struct {
	AccountID int64
	ChatID    string
	AgentID   string
	UserID    int64
	LastSort  int64
	CreatedAt int64
	UpdatedAt int64
}

func (r *threadRow) dest() []any {
	return []any{&r.AccountID, &r.ChatID, &r.AgentID, &r.UserID, &r.LastSort, &r.CreatedAt, &r.UpdatedAt}
}

func (r threadRow) thread() store.Thread {
	return store.Thread{
		AccountID: r.AccountID,
		ChatID:    r.ChatID,
		AgentID:   r.AgentID,
		UserID:    r.UserID,
		LastSort:  r.LastSort,
		CreatedAt: fromNanos(r.CreatedAt),
		UpdatedAt: fromNanos(r.UpdatedAt),
	}
}

type messageRow struct {
	ID   string
	Sort int64
	Body string
}

func (r *messageRow) dest() []any {
	return []any{&r.ID, &r.Sort, &r.Body}
}

// Collectors: slices of rows that grow by one row per scanned row.

type (
	groupRows     []groupRow
	attributeRows []attributeRow
	messageRows   []messageRow
	userAttrRows  []userAttributeRow
)

func (r *groupRows) add() []any {
	*r = append(*r, groupRow{})
	return (&(*r)[len(*r)-1]).dest()
}

func (r *attributeRows) add() []any {
	*r = append(*r, attributeRow{})
	return (&(*r)[len(*r)-1]).dest()
}

// catalogRow is a row of catalogByNameSQL: an attribute (Kind 0) or a
// group (Kind 1, in the columns a group has).
type catalogRow struct {
	Kind int64
	attributeRow
}

type catalogRows []catalogRow

func (r *catalogRows) add() []any {
	*r = append(*r, catalogRow{})
	row := &(*r)[len(*r)-1]
	return []any{&row.Kind, &row.ID, &row.AccountID, &row.EmbedTenantID, &row.Name, &row.Type,
		&row.DisplayName, &row.DefaultValue, &row.Description, &row.CreatedAt, &row.UpdatedAt}
}

// split returns the attributes and the groups of r.
func (r catalogRows) split() (attributeRows, groupRows) {
	attrs := make(attributeRows, 0, len(r))
	var grps groupRows
	for _, c := range r {
		if c.Kind == 0 {
			attrs = append(attrs, c.attributeRow)
			continue
		}
		grps = append(grps, groupRow{ID: c.ID, AccountID: c.AccountID, EmbedTenantID: c.EmbedTenantID,
			Name: c.Name, Description: c.Description, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt})
	}
	return attrs, grps
}

func (r *messageRows) add() []any {
	*r = append(*r, messageRow{})
	return (&(*r)[len(*r)-1]).dest()
}

func (r *userAttrRows) add() []any {
	*r = append(*r, userAttributeRow{})
	return (&(*r)[len(*r)-1]).dest()
}

type countRow struct{ N int64 }

func (r *countRow) dest() []any { return []any{&r.N} }

type countRows []countRow

func (r *countRows) add() []any {
	*r = append(*r, countRow{})
	return (&(*r)[len(*r)-1]).dest()
}
