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

// Expiry deletes what has expired.
type Expiry interface {
	// DeleteExpired deletes, at now, at most limit rows of each kind of
	// what has expired: session ids (used ones included), tokens, the
	// counters behind [UserUpsert.NewEphemeralPerMinute], and ephemeral
	// users (each with everything it owns). It returns how many it deleted
	// in all; fewer than limit means nothing expired is left. Safe to run
	// from several processes at once.
	DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error)
}
