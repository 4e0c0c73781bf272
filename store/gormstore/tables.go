package gormstore

// Account is a tenant of the embedding host (table embedkit_accounts).
type Account struct {
	ID               int64  `gorm:"column:id;primaryKey;autoIncrement"`
	Name             string `gorm:"column:name;not null;uniqueIndex:embedkit_accounts_name"`
	Plan             string `gorm:"column:plan;not null;default:free"`
	UseCreatorMode   bool   `gorm:"column:use_creator_mode;not null;default:false"`
	MaxExternalUsers int64  `gorm:"column:max_external_users;not null;default:0"`
	Branches         string `gorm:"column:branches;not null;default:[]"` // JSON array
	Limits           string `gorm:"column:limits;not null;default:{}"`   // JSON store.Limits
}

// AccountUserSlot counts an account's persistent external users, in the row of shard 0.
type AccountUserSlot struct {
	AccountID int64    `gorm:"column:account_id;primaryKey;autoIncrement:false"`
	Shard     int32    `gorm:"column:shard;primaryKey;autoIncrement:false"`
	N         int64    `gorm:"column:n;not null;default:0"`
	Account   *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// APIKey is the hash of an API key (table embedkit_api_keys).
type APIKey struct {
	Hash      []byte   `gorm:"column:hash;primaryKey"`
	AccountID int64    `gorm:"column:account_id;not null;index:embedkit_api_keys_account"`
	Admin     bool     `gorm:"column:admin;not null;default:false"`
	Origin    string   `gorm:"column:origin;not null;default:config"` // a store.KeyOrigin; "config" for keys older than the column
	Name      string   `gorm:"column:name;not null;default:''"`
	CreatedAt int64    `gorm:"column:created_at;not null;default:0;autoCreateTime:false"` // 0 for keys older than the column
	Account   *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// Deployment is a deployment of an account (table embedkit_deployments).
type Deployment struct {
	AccountID int64    `gorm:"column:account_id;primaryKey;autoIncrement:false"`
	ID        int64    `gorm:"column:id;primaryKey;autoIncrement:false"`
	Name      string   `gorm:"column:name;not null;default:''"`
	Account   *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// Agent is a chat agent of an account (table embedkit_agents).
type Agent struct {
	AccountID    int64    `gorm:"column:account_id;primaryKey;autoIncrement:false"`
	ID           string   `gorm:"column:id;primaryKey"`
	DeploymentID int64    `gorm:"column:deployment_id;not null"`
	Account      *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// User is an external (ExternalID set) or internal user of an account (table embedkit_users).
type User struct {
	ID              int64    `gorm:"column:id;primaryKey;autoIncrement"`
	AccountID       int64    `gorm:"column:account_id;not null;uniqueIndex:embedkit_users_account_external,priority:1;uniqueIndex:embedkit_users_account_internal,priority:1"`
	ExternalID      *string  `gorm:"column:external_id;uniqueIndex:embedkit_users_account_external,priority:2"`
	InternalID      *string  `gorm:"column:internal_id;uniqueIndex:embedkit_users_account_internal,priority:2"`
	Email           string   `gorm:"column:email;not null;default:''"`
	DisplayName     string   `gorm:"column:display_name;not null;default:''"`
	Picture         string   `gorm:"column:picture;not null;default:''"`
	SecurityContext *string  `gorm:"column:security_context"` // a JSON object
	Ephemeral       bool     `gorm:"column:ephemeral;not null;default:false"`
	ExpiresAt       *int64   `gorm:"column:expires_at;index:embedkit_users_expiry,where:ephemeral"`
	CreatedAt       int64    `gorm:"column:created_at;not null;autoCreateTime:false"`
	UpdatedAt       int64    `gorm:"column:updated_at;not null;autoUpdateTime:false"`
	AttributeValues string   `gorm:"column:attribute_values;not null;default:'{}'"` // JSON: attribute ID to value
	GroupIDs        string   `gorm:"column:group_ids;not null;default:'{}'"`        // JSON: embed tenant ID ("0": the account's catalog) to group IDs
	Account         *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// EmbedTenant is a named tenant inside an account (table embedkit_embed_tenants).
type EmbedTenant struct {
	ID        int64    `gorm:"column:id;primaryKey;autoIncrement"`
	AccountID int64    `gorm:"column:account_id;not null;uniqueIndex:embedkit_embed_tenants_name,priority:1"`
	Name      string   `gorm:"column:name;not null;uniqueIndex:embedkit_embed_tenants_name,priority:2"`
	CreatedAt int64    `gorm:"column:created_at;not null;autoCreateTime:false"`
	Account   *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// CatalogGroup defines a group of an account (EmbedTenantID 0) or embed tenant (table embedkit_catalog_groups).
type CatalogGroup struct {
	ID            int64    `gorm:"column:id;primaryKey;autoIncrement;index:embedkit_catalog_groups_keyset,priority:3"`
	AccountID     int64    `gorm:"column:account_id;not null;uniqueIndex:embedkit_catalog_groups_name,priority:1;index:embedkit_catalog_groups_keyset,priority:1"`
	EmbedTenantID int64    `gorm:"column:embed_tenant_id;not null;default:0;uniqueIndex:embedkit_catalog_groups_name,priority:2;index:embedkit_catalog_groups_keyset,priority:2"`
	Name          string   `gorm:"column:name;not null;uniqueIndex:embedkit_catalog_groups_name,priority:3"`
	Description   *string  `gorm:"column:description"`
	CreatedAt     int64    `gorm:"column:created_at;not null;autoCreateTime:false"`
	UpdatedAt     int64    `gorm:"column:updated_at;not null;autoUpdateTime:false"`
	Account       *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// CatalogAttribute is an attribute definition (embedkit_catalog_attributes).
type CatalogAttribute struct {
	ID            int64    `gorm:"column:id;primaryKey;autoIncrement;index:embedkit_catalog_attributes_keyset,priority:3"`
	AccountID     int64    `gorm:"column:account_id;not null;uniqueIndex:embedkit_catalog_attributes_name,priority:1;index:embedkit_catalog_attributes_keyset,priority:1"`
	EmbedTenantID int64    `gorm:"column:embed_tenant_id;not null;default:0;uniqueIndex:embedkit_catalog_attributes_name,priority:2;index:embedkit_catalog_attributes_keyset,priority:2"`
	Name          string   `gorm:"column:name;not null;uniqueIndex:embedkit_catalog_attributes_name,priority:3"`
	Type          string   `gorm:"column:type;not null"`
	DisplayName   *string  `gorm:"column:display_name"`
	DefaultValue  *string  `gorm:"column:default_value"`
	Description   *string  `gorm:"column:description"`
	CreatedAt     int64    `gorm:"column:created_at;not null;autoCreateTime:false"`
	UpdatedAt     int64    `gorm:"column:updated_at;not null;autoUpdateTime:false"`
	Account       *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// Session is a single-use session id's hash and grant (embedkit_sessions).
type Session struct {
	Hash            []byte  `gorm:"column:hash;primaryKey"`
	AccountID       int64   `gorm:"column:account_id;not null"`
	UserID          int64   `gorm:"column:user_id;not null;index:embedkit_sessions_user"`
	DeploymentID    int64   `gorm:"column:deployment_id;not null"`
	EmbedTenantID   int64   `gorm:"column:embed_tenant_id;not null;default:0"`
	EmbedTenantName string  `gorm:"column:embed_tenant_name;not null;default:''"`
	CreatorMode     bool    `gorm:"column:creator_mode;not null;default:false"`
	CreatedAt       int64   `gorm:"column:created_at;not null;autoCreateTime:false"`
	ExpiresAt       int64   `gorm:"column:expires_at;not null;index:embedkit_sessions_expiry"`
	UsedAt          *int64  `gorm:"column:used_at"`
	KeyHash         []byte  `gorm:"column:key_hash;index:embedkit_sessions_key"` // the API key that minted it, if any (deleted with it)
	User            *User   `gorm:"foreignKey:UserID;references:ID;constraint:OnDelete:CASCADE"`
	APIKey          *APIKey `gorm:"foreignKey:KeyHash;references:Hash;constraint:OnDelete:CASCADE"`
}

// Token is a session token's hash and grant (table embedkit_tokens).
type Token struct {
	Hash            []byte  `gorm:"column:hash;primaryKey"`
	AccountID       int64   `gorm:"column:account_id;not null"`
	UserID          int64   `gorm:"column:user_id;not null;index:embedkit_tokens_user"`
	DeploymentID    int64   `gorm:"column:deployment_id;not null"`
	EmbedTenantID   int64   `gorm:"column:embed_tenant_id;not null;default:0"`
	EmbedTenantName string  `gorm:"column:embed_tenant_name;not null;default:''"`
	CreatorMode     bool    `gorm:"column:creator_mode;not null;default:false"`
	CreatedAt       int64   `gorm:"column:created_at;not null;autoCreateTime:false"`
	ExpiresAt       int64   `gorm:"column:expires_at;not null;index:embedkit_tokens_expiry"`
	KeyHash         []byte  `gorm:"column:key_hash;index:embedkit_tokens_key"` // the API key that minted its session id
	User            *User   `gorm:"foreignKey:UserID;references:ID;constraint:OnDelete:CASCADE"`
	APIKey          *APIKey `gorm:"foreignKey:KeyHash;references:Hash;constraint:OnDelete:CASCADE"`
}

// Thread is a chat thread (table embedkit_threads).
type Thread struct {
	AccountID int64           `gorm:"column:account_id;primaryKey;autoIncrement:false"`
	ChatID    string          `gorm:"column:chat_id;primaryKey"`
	AgentID   string          `gorm:"column:agent_id;not null"`
	UserID    int64           `gorm:"column:user_id;not null;index:embedkit_threads_user"`
	LastSort  int64           `gorm:"column:last_sort;not null;default:0"`
	CreatedAt int64           `gorm:"column:created_at;not null;autoCreateTime:false"`
	UpdatedAt int64           `gorm:"column:updated_at;not null;autoUpdateTime:false"`
	User      *User           `gorm:"foreignKey:UserID;references:ID;constraint:OnDelete:CASCADE"`
	Messages  []ThreadMessage `gorm:"foreignKey:AccountID,ChatID;references:AccountID,ChatID;constraint:OnDelete:CASCADE"`
}

// ThreadMessage is a message of a thread (embedkit_thread_messages).
type ThreadMessage struct {
	AccountID int64  `gorm:"column:account_id;primaryKey;autoIncrement:false;index:embedkit_thread_messages_sort,priority:1"`
	ChatID    string `gorm:"column:chat_id;primaryKey;index:embedkit_thread_messages_sort,priority:2"`
	ID        string `gorm:"column:id;primaryKey"`
	Sort      int64  `gorm:"column:sort;not null;index:embedkit_thread_messages_sort,priority:3"`
	Body      string `gorm:"column:body;not null"`
}

// AccountQuota counts toward an account's quota, such as the new ephemeral
// users of a minute, until it expires (table embedkit_account_quotas).
type AccountQuota struct {
	AccountID int64    `gorm:"column:account_id;primaryKey;autoIncrement:false"`
	Name      string   `gorm:"column:name;primaryKey"`
	N         int64    `gorm:"column:n;not null"`
	ExpiresAt int64    `gorm:"column:expires_at;not null;index:embedkit_account_quotas_expiry"`
	Account   *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// SchemaVersion is an applied migration (embedkit_schema_versions).
type SchemaVersion struct {
	Version   int64 `gorm:"column:version;primaryKey;autoIncrement:false"`
	AppliedAt int64 `gorm:"column:applied_at;not null"`
}

func (Account) TableName() string          { return "embedkit_accounts" }
func (AccountUserSlot) TableName() string  { return "embedkit_account_user_slots" }
func (APIKey) TableName() string           { return "embedkit_api_keys" }
func (Deployment) TableName() string       { return "embedkit_deployments" }
func (Agent) TableName() string            { return "embedkit_agents" }
func (User) TableName() string             { return "embedkit_users" }
func (EmbedTenant) TableName() string      { return "embedkit_embed_tenants" }
func (CatalogGroup) TableName() string     { return "embedkit_catalog_groups" }
func (CatalogAttribute) TableName() string { return "embedkit_catalog_attributes" }
func (Session) TableName() string          { return "embedkit_sessions" }
func (Token) TableName() string            { return "embedkit_tokens" }
func (Thread) TableName() string           { return "embedkit_threads" }
func (ThreadMessage) TableName() string    { return "embedkit_thread_messages" }
func (AccountQuota) TableName() string     { return "embedkit_account_quotas" }
func (SchemaVersion) TableName() string    { return "embedkit_schema_versions" }

// Models returns every model of the store (docs/storage.md), referenced
// tables first. A host may read and join the tables; writing them bypasses
// the store's rules, such as the persistent-user count.
func Models() []any {
	return []any{&Account{}, &AccountUserSlot{}, &APIKey{}, &Deployment{}, &Agent{}, &User{}, &EmbedTenant{},
		&CatalogGroup{}, &CatalogAttribute{}, &Session{}, &Token{}, &Thread{}, &ThreadMessage{}, &AccountQuota{}}
}
