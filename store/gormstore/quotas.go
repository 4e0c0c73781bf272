package gormstore

import (
	"context"
	"time"

	"github.com/embedkit/embedkit/store"
	"gorm.io/gorm"
)

// AccountQuota is a counter of an account's quota (table embedkit_account_quotas),
// such as the new ephemeral users of one minute; see store.Quotas.
type AccountQuota struct {
	AccountID int64    `gorm:"column:account_id;primaryKey;autoIncrement:false"`
	Name      string   `gorm:"column:name;primaryKey"`
	N         int64    `gorm:"column:n;not null"`
	ExpiresAt int64    `gorm:"column:expires_at;not null;index:embedkit_account_quotas_expiry"`
	Account   *Account `gorm:"foreignKey:AccountID;references:ID;constraint:OnDelete:CASCADE"`
}

// TableName implements gorm's Tabler.
func (AccountQuota) TableName() string { return "embedkit_account_quotas" }

// addLimits is version 3: the accounts' limits column, the quota counters
// and the indexes that the janitor's deletion of expired session ids and
// tokens uses. A database created at version 1 by this release has them
// already (version 1 creates the current models).
func addLimits(tx *gorm.DB) error {
	m := tx.Migrator()
	if !m.HasColumn(&Account{}, "Limits") {
		if err := m.AddColumn(&Account{}, "Limits"); err != nil {
			return err
		}
	}
	if !m.HasTable(&AccountQuota{}) {
		if err := m.CreateTable(&AccountQuota{}); err != nil {
			return err
		}
	}
	for _, ix := range []struct {
		model any
		name  string
	}{{&Session{}, "embedkit_sessions_expiry"}, {&Token{}, "embedkit_tokens_expiry"}} {
		if !m.HasIndex(ix.model, ix.name) {
			if err := m.CreateIndex(ix.model, ix.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// TakeQuota implements [store.Quotas]: one conditional upsert, exact under
// concurrency (the counter's row is locked until the transaction ends).
func (t *txn) TakeQuota(ctx context.Context, accountID int64, key string, expiresAt time.Time, max int) error {
	const op = "take quota"
	if max <= 0 {
		return newErr(op, store.ErrLimit)
	}
	exp := expiresAt.UnixNano()
	n, err := t.exec(ctx, op,
		`INSERT INTO embedkit_account_quotas (account_id, name, n, expires_at) VALUES (?, ?, 1, ?)
		ON CONFLICT (account_id, name) DO UPDATE SET n = embedkit_account_quotas.n + 1,
			expires_at = CASE WHEN excluded.expires_at > embedkit_account_quotas.expires_at THEN excluded.expires_at ELSE embedkit_account_quotas.expires_at END
		WHERE embedkit_account_quotas.n < ?`,
		accountID, key, exp, max)
	if err != nil {
		return err
	}
	if n == 0 {
		return newErr(op, store.ErrLimit)
	}
	return nil
}

// CountEmbedTenants implements [store.Quotas]. On PostgreSQL a transaction
// first takes an advisory lock per account (held until it ends), and counts
// in the next statement, which sees what a transaction that held the lock
// committed. SQLite serializes writing transactions anyway.
func (t *txn) CountEmbedTenants(ctx context.Context, accountID int64) (int, error) {
	const op = "count embed tenants"
	if t.pg() {
		if _, err := t.exec(ctx, op,
			"SELECT pg_advisory_xact_lock(hashtextextended('embedkit.embed_tenants', ?))", accountID); err != nil {
			return 0, err
		}
	}
	var c countRow
	if _, err := t.find(ctx, op, &c, "SELECT COUNT(*) FROM embedkit_embed_tenants WHERE account_id = ?", accountID); err != nil {
		return 0, err
	}
	return int(c.N), nil
}

// DeleteExpired implements [store.Quotas]: one DELETE per table, each
// bounded by what is left of limit. Concurrent janitors on PostgreSQL skip
// each other's rows instead of waiting.
func (t *txn) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	const op = "delete expired"
	lock := ""
	if t.pg() {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	n0 := nowOr(now).UnixNano()
	stmts := []struct {
		query string
		args  []any
	}{
		{`DELETE FROM embedkit_sessions WHERE hash IN (SELECT hash FROM embedkit_sessions WHERE expires_at <= ? OR used_at IS NOT NULL LIMIT ?` + lock + `)`, []any{n0}},
		{`DELETE FROM embedkit_tokens WHERE hash IN (SELECT hash FROM embedkit_tokens WHERE expires_at <= ? LIMIT ?` + lock + `)`, []any{n0}},
		{`DELETE FROM embedkit_account_quotas WHERE (account_id, name) IN (SELECT account_id, name FROM embedkit_account_quotas WHERE expires_at <= ? LIMIT ?` + lock + `)`, []any{n0}},
	}
	total := 0
	for _, s := range stmts {
		if total >= limit {
			break
		}
		n, err := t.exec(ctx, op, s.query, append(s.args, limit-total)...)
		if err != nil {
			return total, err
		}
		total += int(n)
	}
	return total, nil
}

// TakeQuota implements [store.Quotas] in its own transaction.
func (s *Store) TakeQuota(ctx context.Context, accountID int64, key string, expiresAt time.Time, max int) error {
	_, err := write(ctx, s, func(t *txn) (struct{}, error) {
		return struct{}{}, t.TakeQuota(ctx, accountID, key, expiresAt, max)
	})
	return err
}

// CountEmbedTenants implements [store.Quotas]; outside a transaction it
// holds no lock.
func (s *Store) CountEmbedTenants(ctx context.Context, accountID int64) (int, error) {
	return read(ctx, s, func(t *txn) (int, error) { return t.CountEmbedTenants(ctx, accountID) })
}

// DeleteExpired implements [store.Quotas] in its own transaction.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	return write(ctx, s, func(t *txn) (int, error) { return t.DeleteExpired(ctx, now, limit) })
}
