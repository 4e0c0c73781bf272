package store

import (
	"context"
	"time"
)

// Plan is an account's subscription plan. Chat is available on
// [PlanPremium] and [PlanEnterprise].
type Plan string

// The plans an account can have.
const (
	PlanFree       Plan = "free"
	PlanPremium    Plan = "premium"
	PlanEnterprise Plan = "enterprise"
)

// HasChat reports whether the plan includes the chat API.
func (p Plan) HasChat() bool { return p == PlanPremium || p == PlanEnterprise }

// Account is a tenant: it owns API keys, deployments, agents, the tenant-wide
// catalog, internal users and external users.
type Account struct {
	ID             int64
	Name           string // unique
	Plan           Plan
	UseCreatorMode bool
	// MaxExternalUsers limits persistent external users; 0 means
	// [DefaultMaxExternalUsers]. See [Account.ExternalUserLimit].
	MaxExternalUsers int
	// Limits are the account's own limits; a zero field means the
	// handler's default.
	Limits Limits
	// Branches are the development branches agents may query.
	Branches []string
}

// APIKey is an account's API key, known to the store only by its hash.
type APIKey struct {
	Hash      []byte // SHA-256 of the key
	AccountID int64
	Admin     bool
	// Origin says who manages the key; empty is stored as [OriginAPI].
	Origin KeyOrigin
	// Name is an optional label for people (never the key itself).
	Name string
	// CreatedAt is kept from the call that created the key; later saves do
	// not change it. Zero when the creator did not say.
	CreatedAt time.Time
}

// KeyOrigin says who manages an API key, so that the bootstrap
// configuration can remove the keys it no longer lists without touching the
// others.
type KeyOrigin string

// The origins of an API key.
const (
	// OriginAPI marks a key created through the Go API (or by SaveAPIKey
	// without an origin): the bootstrap configuration never removes it.
	OriginAPI KeyOrigin = "api"
	// OriginConfig marks a key listed by the bootstrap configuration: a
	// later configuration of its account that no longer lists it removes it.
	OriginConfig KeyOrigin = "config"
)

// Deployment is something a session grants access to.
type Deployment struct {
	AccountID int64
	ID        int64 // chosen by the account, unique within it
	Name      string
}

// Agent is an AI agent of an account, addressed by its string id.
type Agent struct {
	AccountID    int64
	ID           string // unique within the account
	DeploymentID int64
}

// Accounts reads and writes accounts and what belongs only to them.
type Accounts interface {
	// SaveAccount creates the account named a.Name or updates its plan,
	// flags, limits and branches, and returns it with its ID. Idempotent.
	SaveAccount(ctx context.Context, a Account) (Account, error)
	// AccountByID and AccountByName return [ErrNotFound] when missing.
	AccountByID(ctx context.Context, id int64) (Account, error)
	AccountByName(ctx context.Context, name string) (Account, error)

	// SaveAPIKey stores k, or updates its admin flag, origin and name when
	// its hash exists for the same account (CreatedAt is kept). A key
	// belongs to one account: a hash stored for another account is
	// [ErrConflict], and nothing changes.
	SaveAPIKey(ctx context.Context, k APIKey) error
	// APIKeyByHash returns the key with this hash and the account it
	// belongs to, or [ErrNotFound] for an unknown hash. Callers still
	// compare the returned hash in constant time.
	APIKeyByHash(ctx context.Context, hash []byte) (APIKey, Account, error)
	// APIKeys returns the account's keys ordered by CreatedAt, then hash;
	// none is an empty result, not an error.
	APIKeys(ctx context.Context, accountID int64) ([]APIKey, error)
	// DeleteAPIKey deletes the account's key with this hash, so that it
	// stops authenticating at once, and with it the session ids and tokens
	// it minted (those whose [Session.KeyHash] is hash). A hash that is unknown or belongs to
	// another account is [ErrNotFound], and nothing changes.
	DeleteAPIKey(ctx context.Context, accountID int64, hash []byte) error

	// SaveDeployment creates or renames a deployment. Idempotent. (A
	// deployment is read through [Catalog.Lookup].)
	SaveDeployment(ctx context.Context, d Deployment) error

	// SaveAgent creates or updates an agent. Idempotent.
	SaveAgent(ctx context.Context, a Agent) error
	// Agent returns [ErrNotFound] when missing.
	Agent(ctx context.Context, accountID int64, id string) (Agent, error)
}

// Clock returns the current time; tests inject a fake one.
type Clock func() time.Time

// DefaultMaxExternalUsers is the limit of persistent external users of an
// account whose MaxExternalUsers is 0.
const DefaultMaxExternalUsers = 10000

// ExternalUserLimit returns the account's limit of persistent external
// users: MaxExternalUsers when above zero, [DefaultMaxExternalUsers]
// otherwise. It is the one place the limit is decided: generate-session and
// chat requests that provision users both enforce it, so the two endpoints
// never disagree for one account.
func (a Account) ExternalUserLimit() int {
	if a.MaxExternalUsers > 0 {
		return a.MaxExternalUsers
	}
	return DefaultMaxExternalUsers
}
