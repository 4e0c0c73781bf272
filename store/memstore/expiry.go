package memstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/embedkit/embedkit/store"
)

// minuteKey names the counter of the ephemeral users an account created
// in one clock minute (see [db.countEphemeral]).
type minuteKey struct {
	accountID int64
	minute    time.Time
}

// deleteExpired deletes at most limit of each kind of what expired at now:
// session ids (used ones included), tokens, counters of minutes that have
// ended, and ephemeral users with everything they own.
func (d *db) deleteExpired(now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	now = d.now(now)
	sessions := 0
	for _, k := range sortedKeys(d.sessions) {
		if sessions == limit {
			break
		}
		if s := d.sessions[k]; s.used || !s.grant.ExpiresAt.After(now) {
			ndel(d, d.userSess, s.grant.UserID, k)
			del(d, d.sessions, k)
			sessions++
		}
	}
	tokens := 0
	for _, k := range sortedKeys(d.tokens) {
		if tokens == limit {
			break
		}
		if g := d.tokens[k]; !g.ExpiresAt.After(now) {
			ndel(d, d.userTokens, g.UserID, k)
			del(d, d.tokens, k)
			tokens++
		}
	}
	counters := 0
	for k := range d.ephemeralCounts {
		if counters == limit {
			break
		}
		if !k.minute.Add(time.Minute).After(now) {
			del(d, d.ephemeralCounts, k)
			counters++
		}
	}
	return sessions + tokens + counters + d.deleteExpiredUsers(now, limit), nil
}

// deleteExpiredUsers deletes at most limit ephemeral users expired at now,
// those that expired first first.
func (d *db) deleteExpiredUsers(now time.Time, limit int) int {
	var due []store.User
	for id := range d.ephemerals {
		if u := d.users[id]; expired(u, now) {
			due = append(due, u)
		}
	}
	slices.SortFunc(due, func(a, b store.User) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), cmp.Compare(a.ID, b.ID))
	})
	due = due[:min(len(due), limit)]
	for _, u := range due {
		d.deleteUser(u.ID)
	}
	return len(due)
}

// DeleteExpired implements [store.Expiry]. Its cost grows with the number
// of stored session ids, tokens and ephemeral users.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	return write(s, ctx, func(d *db) (int, error) { return d.deleteExpired(now, limit) })
}

func (t *txView) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	return call(t, ctx, func(d *db) (int, error) { return d.deleteExpired(now, limit) })
}
