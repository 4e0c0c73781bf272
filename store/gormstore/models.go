package gormstore

import (
	"database/sql/driver"
	"encoding/json"

	"github.com/embedkit/embedkit/store"
)

// Row structs: what a SELECT or RETURNING list scans into. Times are Unix
// nanoseconds; nullable columns are pointers. None of these leave the package.

const accountCols = "id, name, plan, use_creator_mode, max_external_users, branches"

type accountRow struct {
	ID               int64  `gorm:"column:id"`
	Name             string `gorm:"column:name"`
	Plan             string `gorm:"column:plan"`
	UseCreatorMode   bool   `gorm:"column:use_creator_mode"`
	MaxExternalUsers int64  `gorm:"column:max_external_users"`
	Branches         string `gorm:"column:branches"`
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
	return a
}

type apiKeyRow struct {
	Hash      []byte `gorm:"column:hash"`
	AccountID int64  `gorm:"column:account_id"`
	Admin     bool   `gorm:"column:admin"`
}

type deploymentRow struct {
	AccountID int64  `gorm:"column:account_id"`
	ID        int64  `gorm:"column:id"`
	Name      string `gorm:"column:name"`
}

type agentRow struct {
	AccountID    int64  `gorm:"column:account_id"`
	ID           string `gorm:"column:id"`
	DeploymentID int64  `gorm:"column:deployment_id"`
}

const userCols = "id, account_id, external_id, internal_id, email, display_name, picture, security_context, ephemeral, expires_at, created_at, updated_at"

type userRow struct {
	ID              int64   `gorm:"column:id"`
	AccountID       int64   `gorm:"column:account_id"`
	ExternalID      *string `gorm:"column:external_id"`
	InternalID      *string `gorm:"column:internal_id"`
	Email           string  `gorm:"column:email"`
	DisplayName     string  `gorm:"column:display_name"`
	Picture         string  `gorm:"column:picture"`
	SecurityContext *string `gorm:"column:security_context"`
	Ephemeral       bool    `gorm:"column:ephemeral"`
	ExpiresAt       *int64  `gorm:"column:expires_at"`
	CreatedAt       int64   `gorm:"column:created_at"`
	UpdatedAt       int64   `gorm:"column:updated_at"`
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
	Name  string `gorm:"column:name"`
	Type  string `gorm:"column:type"`
	Value string `gorm:"column:value"`
}

const tenantCols = "id, account_id, name, created_at"

type tenantRow struct {
	ID        int64  `gorm:"column:id"`
	AccountID int64  `gorm:"column:account_id"`
	Name      string `gorm:"column:name"`
	CreatedAt int64  `gorm:"column:created_at"`
}

func (r tenantRow) tenant() store.EmbedTenant {
	return store.EmbedTenant{ID: r.ID, AccountID: r.AccountID, Name: r.Name, CreatedAt: fromNanos(r.CreatedAt)}
}

const groupCols = "id, account_id, embed_tenant_id, name, COALESCE(description, '') AS description, created_at, updated_at"

type groupRow struct {
	ID            int64  `gorm:"column:id"`
	AccountID     int64  `gorm:"column:account_id"`
	EmbedTenantID int64  `gorm:"column:embed_tenant_id"`
	Name          string `gorm:"column:name"`
	Description   string `gorm:"column:description"`
	CreatedAt     int64  `gorm:"column:created_at"`
	UpdatedAt     int64  `gorm:"column:updated_at"`
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
	ID            int64  `gorm:"column:id"`
	AccountID     int64  `gorm:"column:account_id"`
	EmbedTenantID int64  `gorm:"column:embed_tenant_id"`
	Name          string `gorm:"column:name"`
	Type          string `gorm:"column:type"`
	DisplayName   string `gorm:"column:display_name"`
	DefaultValue  string `gorm:"column:default_value"`
	Description   string `gorm:"column:description"`
	CreatedAt     int64  `gorm:"column:created_at"`
	UpdatedAt     int64  `gorm:"column:updated_at"`
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

const grantCols = "account_id, user_id, deployment_id, embed_tenant_id, embed_tenant_name, creator_mode, created_at, expires_at"

// grantRow is the grant a session id or a token carries.
type grantRow struct {
	AccountID       int64  `gorm:"column:account_id"`
	UserID          int64  `gorm:"column:user_id"`
	DeploymentID    int64  `gorm:"column:deployment_id"`
	EmbedTenantID   int64  `gorm:"column:embed_tenant_id"`
	EmbedTenantName string `gorm:"column:embed_tenant_name"`
	CreatorMode     bool   `gorm:"column:creator_mode"`
	CreatedAt       int64  `gorm:"column:created_at"`
	ExpiresAt       int64  `gorm:"column:expires_at"`
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
	}
}

const threadCols = "account_id, chat_id, agent_id, user_id, last_sort, created_at, updated_at"

type threadRow struct {
	AccountID int64  `gorm:"column:account_id"`
	ChatID    string `gorm:"column:chat_id"`
	AgentID   string `gorm:"column:agent_id"`
	UserID    int64  `gorm:"column:user_id"`
	LastSort  int64  `gorm:"column:last_sort"`
	CreatedAt int64  `gorm:"column:created_at"`
	UpdatedAt int64  `gorm:"column:updated_at"`
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
	ID   string `gorm:"column:id"`
	Sort int64  `gorm:"column:sort"`
	Body string `gorm:"column:body"`
}

// blob passes a []byte as one parameter. GORM expands slice parameters that
// follow "(" into lists ("VALUES (?" would become one parameter per byte);
// a driver.Valuer is always bound as is.
type blob []byte

// Value implements driver.Valuer.
func (b blob) Value() (driver.Value, error) { return []byte(b), nil }
