package store

import (
	"context"
	"time"
)

// Limits are an account's own limits. A zero field means "the handler's
// default", a negative one "no limit". chatstream's options set the
// defaults of RunningTurns, RunningTurnsPerUser, NewEphemeralUsersPerMinute,
// ThreadTurns and ThreadBytes, and embedsession's option the default of
// EmbedTenants. The JSON names are those of the bootstrap file's "limits"
// object.
type Limits struct {
	// RunningTurns caps the chat turns of the account running at once,
	// across all replicas (429 over it).
	RunningTurns int `json:"runningTurns,omitempty"`
	// RunningTurnsPerUser caps the running chat turns of one user (429).
	RunningTurnsPerUser int `json:"runningTurnsPerUser,omitempty"`
	// NewEphemeralUsersPerMinute caps the ephemeral users that chat may
	// create per clock minute (429).
	NewEphemeralUsersPerMinute int `json:"newEphemeralUsersPerMinute,omitempty"`
	// EmbedTenants caps the account's embed tenants (403).
	EmbedTenants int `json:"embedTenants,omitempty"`
	// ThreadTurns caps the turns of one chat thread (409).
	ThreadTurns int `json:"threadTurns,omitempty"`
	// ThreadBytes caps the stored messages of one chat thread, in bytes of
	// their stored JSON (409).
	ThreadBytes int64 `json:"threadBytes,omitempty"`
}

// Quotas counts what the account limits need to count exactly under
// concurrency, on every replica that uses the store.
type Quotas interface {
	// TakeQuota counts one more use of the counter key of an account when
	// fewer than max uses are counted, and returns [ErrLimit] (changing
	// nothing) otherwise. A counter is created at its first use and lives
	// until expiresAt, when [Quotas.DeleteExpired] may delete it; a key
	// names a window by itself (for example "ephemeral:<minute>"). Inside
	// a transaction, the use is undone when the transaction rolls back.
	TakeQuota(ctx context.Context, accountID int64, key string, expiresAt time.Time, max int) error
	// CountEmbedTenants returns how many embed tenants the account has.
	// Inside a transaction it also holds, until the end of the
	// transaction, a lock per account that other CountEmbedTenants calls
	// wait for, so that counting then creating a tenant is exact under
	// concurrency.
	CountEmbedTenants(ctx context.Context, accountID int64) (int, error)
	// DeleteExpired deletes at most limit stored session ids, tokens and
	// quota counters that expired at now (used session ids included), and
	// returns how many it deleted. Safe to run from several processes at
	// once.
	DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error)
}
