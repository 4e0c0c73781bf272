package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/embedkit/embedkit/store"
)

// quota is a counter of [store.Quotas.TakeQuota].
type quota struct {
	n         int
	expiresAt time.Time
}

func (d *db) takeQuota(accountID int64, key string, expiresAt time.Time, max int) error {
	k := nameKey{accountID, key}
	q := d.quotas[k]
	if q.n >= max {
		return fmt.Errorf("memstore: take quota: %w", store.ErrLimit)
	}
	q.n++
	if expiresAt.After(q.expiresAt) {
		q.expiresAt = norm(expiresAt)
	}
	set(d, d.quotas, k, q)
	return nil
}

func (d *db) countEmbedTenants(accountID int64) (int, error) {
	n := 0
	for k := range d.tenantByName {
		if k.accountID == accountID {
			n++
		}
	}
	return n, nil
}

func (d *db) deleteExpired(now time.Time, limit int) (int, error) {
	now = d.now(now)
	n := 0
	for _, k := range sortedKeys(d.sessions) {
		if n >= limit {
			return n, nil
		}
		s := d.sessions[k]
		if s.used || !s.grant.ExpiresAt.After(now) {
			ndel(d, d.userSess, s.grant.UserID, k)
			del(d, d.sessions, k)
			n++
		}
	}
	for _, k := range sortedKeys(d.tokens) {
		if n >= limit {
			return n, nil
		}
		g := d.tokens[k]
		if !g.ExpiresAt.After(now) {
			ndel(d, d.userTokens, g.UserID, k)
			del(d, d.tokens, k)
			n++
		}
	}
	for k, q := range d.quotas {
		if n >= limit {
			return n, nil
		}
		if !q.expiresAt.After(now) {
			del(d, d.quotas, k)
			n++
		}
	}
	return n, nil
}

// TakeQuota implements [store.Quotas].
func (s *Store) TakeQuota(ctx context.Context, accountID int64, key string, expiresAt time.Time, max int) error {
	return write0(s, ctx, func(d *db) error { return d.takeQuota(accountID, key, expiresAt, max) })
}

// CountEmbedTenants implements [store.Quotas]. Transactions of a memstore
// are serializable, so no lock is needed.
func (s *Store) CountEmbedTenants(ctx context.Context, accountID int64) (int, error) {
	return read(s, ctx, func(d *db) (int, error) { return d.countEmbedTenants(accountID) })
}

// DeleteExpired implements [store.Quotas].
func (s *Store) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	return write(s, ctx, func(d *db) (int, error) { return d.deleteExpired(now, limit) })
}

func (t *txView) TakeQuota(ctx context.Context, accountID int64, key string, expiresAt time.Time, max int) error {
	return call0(t, ctx, func(d *db) error { return d.takeQuota(accountID, key, expiresAt, max) })
}

func (t *txView) CountEmbedTenants(ctx context.Context, accountID int64) (int, error) {
	return call(t, ctx, func(d *db) (int, error) { return d.countEmbedTenants(accountID) })
}

func (t *txView) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	return call(t, ctx, func(d *db) (int, error) { return d.deleteExpired(now, limit) })
}
