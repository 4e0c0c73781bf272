package gormstore

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/embedkit/embedkit/store"
)

// visible is the predicate of a user that has not expired at the bound time.
const visible = "(NOT ephemeral OR expires_at IS NULL OR expires_at > ?)"

func (t *txn) UpsertExternalUser(ctx context.Context, u store.ExternalUserUpsert) (store.User, error) {
	const op = "upsert external user"
	now := nowOr(u.Now).UnixNano()
	if u.InsertFirst {
		// A new user, one statement; a user that exists (visible or not)
		// makes the insert change nothing, and the paths below apply.
		user, ok, err := t.insertExternalUser(ctx, u, now)
		if err != nil || ok {
			return user, err
		}
	}
	// Fast path, one statement: a returning user (unless the caller's
	// Lookup just tried the same statement; a user created since then by a
	// concurrent transaction is found below).
	if !u.NotReturning {
		var out userRow
		q, args := returningUpdate(u, now)
		n, err := t.find(ctx, op, &out, q, args...)
		if err != nil {
			return store.User{}, err
		}
		if n > 0 {
			return out.user(), nil
		}
	}
	// Two rounds at most: a concurrent first upsert of the same external id
	// can win the insert, after which the update path applies.
	for range 3 {
		var row userRow
		n, err := t.find(ctx, op, &row,
			"SELECT "+userCols+" FROM embedkit_users WHERE account_id = ? AND external_id = ?"+t.forUpdate(),
			u.AccountID, u.ExternalID)
		if err != nil {
			return store.User{}, err
		}
		if n > 0 && row.Ephemeral && row.ExpiresAt != nil && *row.ExpiresAt <= now {
			// Expired ephemeral users are absent: delete with everything
			// they own (cascades), then create anew. They never counted.
			if _, err := t.exec(ctx, op, "DELETE FROM embedkit_users WHERE id = ?", row.ID); err != nil {
				return store.User{}, err
			}
			n = 0
		}
		if n > 0 {
			return t.updateExternalUser(ctx, row, u, now)
		}
		user, ok, err := t.insertExternalUser(ctx, u, now)
		if err != nil || ok {
			return user, err
		}
	}
	return store.User{}, t.fail(newErr(op, store.ErrConflict))
}

// returningUpdate is the statement that applies u to a returning user: a
// visible one that u leaves persistent or ephemeral as it is. It returns the
// updated user, or no row.
func returningUpdate(u store.ExternalUserUpsert, now int64) (string, []any) {
	cond, extra := "NOT ephemeral", []any{}
	if !u.Persistent {
		cond, extra = visible, []any{now}
	}
	return `UPDATE embedkit_users SET email = COALESCE(?, email), display_name = COALESCE(?, display_name),
		picture = COALESCE(?, picture), security_context = COALESCE(?, security_context), updated_at = ?
		WHERE account_id = ? AND external_id = ? AND ` + cond + ` RETURNING ` + userCols,
		append([]any{optString(u.Email), optString(u.DisplayName), optString(u.Picture), rawOrNil(u.SecurityContext), now,
			u.AccountID, u.ExternalID}, extra...)
}

// insertExternalUser creates the user; ok is false when a concurrent
// transaction created it first (nothing is then changed).
func (t *txn) insertExternalUser(ctx context.Context, u store.ExternalUserUpsert, now int64) (store.User, bool, error) {
	const op = "upsert external user"
	// Insert first, count second: on PostgreSQL the INSERT waits for a
	// concurrent uncommitted insert of the same external id and then skips,
	// so a simultaneous first request never takes (and is never refused)
	// a place that the user it names already holds. A refused count rolls
	// the insert back with the transaction.
	var expires any
	if !u.Persistent {
		expires = nanos(u.EphemeralExpiresAt)
	}
	sc := rawOrNil(u.SecurityContext)
	var row userRow
	n, err := t.find(ctx, op, &row,
		`INSERT INTO embedkit_users (account_id, external_id, email, display_name, picture, security_context, ephemeral, expires_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (account_id, external_id) DO NOTHING
		RETURNING `+userCols,
		u.AccountID, u.ExternalID, deref(u.Email), deref(u.DisplayName), deref(u.Picture), sc,
		!u.Persistent, expires, now, now)
	if err != nil {
		return store.User{}, false, err
	}
	if n == 0 {
		return store.User{}, false, nil
	}
	if u.Persistent {
		if err := t.countPersistent(ctx, u.AccountID, u.MaxUsers); err != nil {
			return store.User{}, false, err
		}
	}
	return row.user(), true, nil
}

func (t *txn) updateExternalUser(ctx context.Context, row userRow, u store.ExternalUserUpsert, now int64) (store.User, error) {
	const op = "upsert external user"
	set := ""
	if u.Persistent && row.Ephemeral {
		if err := t.countPersistent(ctx, u.AccountID, u.MaxUsers); err != nil {
			return store.User{}, err
		}
		set = ", ephemeral = FALSE, expires_at = NULL"
	}
	sc := rawOrNil(u.SecurityContext)
	var out userRow
	n, err := t.find(ctx, op, &out,
		`UPDATE embedkit_users SET email = COALESCE(?, email), display_name = COALESCE(?, display_name),
		picture = COALESCE(?, picture), security_context = COALESCE(?, security_context), updated_at = ?`+set+`
		WHERE id = ? RETURNING `+userCols,
		optString(u.Email), optString(u.DisplayName), optString(u.Picture), sc, now, row.ID)
	if err != nil {
		return store.User{}, err
	}
	if n == 0 {
		return store.User{}, newErr(op, store.ErrNotFound)
	}
	return out.user(), nil
}

// The persistent external users of an account are counted in
// account_user_slots: one row on SQLite, where writers are serialized, and
// slotShards rows on PostgreSQL, so that concurrent creations lock different
// rows instead of queueing on one until their transactions commit. The count
// is the sum of the rows.
//
// PostgreSQL fast path: increment the transaction's own shard and read the
// sum in one statement. Other uncommitted increments are invisible, but each
// holds the lock of another shard, so there are at most slotShards-1 of them:
// when sum+slotShards-1 <= max the new user fits whatever they do. Otherwise
// (near the limit) the increment is undone and the transaction is run again
// in exact mode, which locks every shard of the account in shard order (no
// deadlock: fast transactions hold one shard and wait for no other), sums,
// and increments only if the sum is below max. The limit is exact either way.
const slotShards = 16

// errNearLimit asks InTx to run the transaction again in exact mode.
var errNearLimit = &opError{op: "upsert external user", kind: store.ErrUnavailable,
	err: errors.New("near the external user limit; retrying in exact mode"), retry: true}

// countPersistent takes one place of the account's persistent external user
// limit or returns [store.ErrLimit], leaving the count unchanged then. A max
// of zero or less means no limit.
func (t *txn) countPersistent(ctx context.Context, accountID int64, max int) error {
	const op = "upsert external user"
	if !t.pg() {
		n, err := t.exec(ctx, op,
			`INSERT INTO embedkit_account_user_slots (account_id, shard, n) VALUES (?, 0, 1)
			ON CONFLICT (account_id, shard) DO UPDATE SET n = embedkit_account_user_slots.n + 1
			WHERE ? <= 0 OR embedkit_account_user_slots.n < ?`,
			accountID, max, max)
		if err != nil {
			return err
		}
		if n == 0 {
			return newErr(op, store.ErrLimit)
		}
		return nil
	}
	shard := t.slotShard()
	if !t.exact {
		var total countRow
		if _, err := t.find(ctx, op, &total,
			`WITH inc AS (
				INSERT INTO embedkit_account_user_slots (account_id, shard, n) VALUES (?, ?, 1)
				ON CONFLICT (account_id, shard) DO UPDATE SET n = embedkit_account_user_slots.n + 1
				RETURNING n)
			SELECT ((SELECT n FROM inc) + COALESCE((SELECT SUM(n) FROM embedkit_account_user_slots WHERE account_id = ? AND shard <> ?), 0))::bigint`,
			accountID, shard, accountID, shard); err != nil {
			return err
		}
		if max <= 0 || total.N+slotShards-1 <= int64(max) {
			return nil
		}
		if err := t.uncount(ctx, accountID); err != nil {
			return err
		}
		t.abort = errNearLimit
		return errNearLimit
	}
	// Exact mode: every shard exists (SaveAccount creates them; this
	// covers older accounts), then lock them all in order and sum.
	if _, err := t.exec(ctx, op,
		`INSERT INTO embedkit_account_user_slots (account_id, shard, n)
		SELECT ?, s, 0 FROM generate_series(0, ?) AS s ON CONFLICT (account_id, shard) DO NOTHING`,
		accountID, slotShards-1); err != nil {
		return err
	}
	var rows countRows
	if _, err := t.find(ctx, op, &rows,
		"SELECT n FROM embedkit_account_user_slots WHERE account_id = ? ORDER BY shard FOR UPDATE", accountID); err != nil {
		return err
	}
	var sum int64
	for _, r := range rows {
		sum += r.N
	}
	if max > 0 && sum >= int64(max) {
		return newErr(op, store.ErrLimit)
	}
	_, err := t.exec(ctx, op, "UPDATE embedkit_account_user_slots SET n = n + 1 WHERE account_id = ? AND shard = ?", accountID, shard)
	return err
}

// uncount gives back one place of the account's count (a persistent user
// was deleted, or a counted creation did not happen).
func (t *txn) uncount(ctx context.Context, accountID int64) error {
	_, err := t.exec(ctx, "count external users",
		"UPDATE embedkit_account_user_slots SET n = n - 1 WHERE account_id = ? AND shard = ?", accountID, t.slotShard())
	return err
}

// slotShard is the count shard of the transaction, chosen once so that a
// transaction locks one shard at most on the fast path.
func (t *txn) slotShard() int {
	if !t.pg() {
		return 0
	}
	if t.shard < 0 {
		t.shard = rand.IntN(slotShards)
	}
	return t.shard
}

func rawOrNil(v json.RawMessage) any {
	if v == nil {
		return nil
	}
	return string(v)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (t *txn) UserByExternalID(ctx context.Context, accountID int64, externalID string, now time.Time) (store.User, error) {
	var row userRow
	n, err := t.find(ctx, "user by external id", &row,
		"SELECT "+userCols+" FROM embedkit_users WHERE account_id = ? AND external_id = ? AND "+visible,
		accountID, externalID, nowOr(now).UnixNano())
	if err != nil {
		return store.User{}, err
	}
	if n == 0 {
		return store.User{}, newErr("user by external id", store.ErrNotFound)
	}
	return row.user(), nil
}

func (t *txn) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	var row userRow
	n, err := t.find(ctx, "user by id", &row,
		"SELECT "+userCols+" FROM embedkit_users WHERE id = ? AND "+visible, id, nowOr(now).UnixNano())
	if err != nil {
		return store.User{}, err
	}
	if n == 0 {
		return store.User{}, newErr("user by id", store.ErrNotFound)
	}
	return row.user(), nil
}

func (t *txn) SaveInternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	const op = "save internal user"
	email := ""
	if strings.Contains(username, "@") {
		email = username
	}
	now := time.Now().UnixNano()
	if _, err := t.exec(ctx, op,
		`INSERT INTO embedkit_users (account_id, internal_id, email, created_at, updated_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (account_id, internal_id) DO NOTHING`,
		accountID, username, email, now, now); err != nil {
		return store.User{}, err
	}
	return t.InternalUser(ctx, accountID, username)
}

func (t *txn) InternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	var row userRow
	n, err := t.find(ctx, "internal user", &row,
		"SELECT "+userCols+" FROM embedkit_users WHERE account_id = ? AND internal_id = ?", accountID, username)
	if err != nil {
		return store.User{}, err
	}
	if n == 0 {
		return store.User{}, newErr("internal user", store.ErrNotFound)
	}
	return row.user(), nil
}

func isNullJSON(v json.RawMessage) bool {
	return len(v) == 0 || string(v) == "null"
}

func (t *txn) SetAttributeValues(ctx context.Context, userID int64, values []store.AttributeValue) error {
	const op = "set attribute values"
	var set []store.AttributeValue
	var clear []int64
	for _, v := range values {
		if isNullJSON(v.Value) {
			clear = append(clear, v.AttributeID)
		} else {
			set = append(set, v)
		}
	}
	for chunk := range chunks(set, batchRows) {
		args := make([]any, 0, 3*len(chunk))
		for _, v := range chunk {
			args = append(args, userID, v.AttributeID, string(v.Value))
		}
		if !t.pg() {
			// SQLite writes nothing when the WHERE of DO UPDATE leaves a
			// row as it is. Without the filter below, the statement reads
			// no table it writes, so SQLite needs no temporary b-tree for
			// it (see liteList for what one costs).
			if err := t.run(ctx, op, `INSERT INTO embedkit_attribute_values (user_id, attribute_id, value)
				VALUES `+placeholders(len(chunk), 3)+`
				ON CONFLICT (user_id, attribute_id) DO UPDATE SET value = excluded.value
				WHERE embedkit_attribute_values.value <> excluded.value`, args...); err != nil {
				return err
			}
			continue
		}
		// PostgreSQL: unchanged values are filtered out before the upsert:
		// ON CONFLICT DO UPDATE locks (writes) the conflicting row even when
		// its WHERE leaves it as it is, and most requests repeat a user's
		// values.
		rows := "(CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS TEXT))"
		if len(chunk) > 1 {
			rows += ", " + placeholders(len(chunk)-1, 3)
		}
		if err := t.run(ctx, op,
			`INSERT INTO embedkit_attribute_values (user_id, attribute_id, value)
			SELECT v.column1, v.column2, v.column3 FROM (VALUES `+rows+`) AS v
			WHERE NOT EXISTS (SELECT 1 FROM embedkit_attribute_values o
				WHERE o.user_id = v.column1 AND o.attribute_id = v.column2 AND o.value = v.column3)
			ON CONFLICT (user_id, attribute_id) DO UPDATE SET value = excluded.value
			WHERE embedkit_attribute_values.value <> excluded.value`,
			args...); err != nil {
			return err
		}
	}
	if len(clear) > 0 {
		if err := t.run(ctx, op, "DELETE FROM embedkit_attribute_values WHERE user_id = ? AND attribute_id IN ?", userID, clear); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) AttributeValues(ctx context.Context, userID int64, s store.Scope) ([]store.UserAttribute, error) {
	var rows userAttrRows
	if _, err := t.find(ctx, "attribute values", &rows,
		`SELECT a.name AS name, a.type AS type, v.value AS value
		FROM embedkit_attribute_values v JOIN embedkit_catalog_attributes a ON a.id = v.attribute_id
		WHERE v.user_id = ? AND a.account_id = ? AND a.embed_tenant_id = ?
		ORDER BY a.name`,
		userID, s.AccountID, s.EmbedTenantID); err != nil {
		return nil, err
	}
	out := make([]store.UserAttribute, len(rows))
	for i, r := range rows {
		out[i] = store.UserAttribute{Name: r.Name, Type: store.AttributeType(r.Type), Value: json.RawMessage(r.Value)}
	}
	return out, nil
}

// insertMembers adds the memberships of the listed groups that belong to the
// scope; existing ones are kept (PostgreSQL; SQLite joins the list, see
// ReplaceMemberships).
const insertMembers = `INSERT INTO embedkit_group_members (user_id, group_id)
	SELECT ?, id FROM embedkit_catalog_groups WHERE id IN ? AND account_id = ? AND embed_tenant_id = ?
	ON CONFLICT (user_id, group_id) DO NOTHING`

func (t *txn) ReplaceMemberships(ctx context.Context, userID int64, s store.Scope, groupIDs []int64) error {
	const op = "replace memberships"
	// Delete the memberships of scope s that are not kept, then insert the
	// missing ones; groups outside scope s are ignored.
	// EXISTS, not IN: the user has few memberships, the scope may have
	// many groups.
	del := `DELETE FROM embedkit_group_members WHERE user_id = ? AND EXISTS (SELECT 1 FROM embedkit_catalog_groups g
		WHERE g.id = embedkit_group_members.group_id AND g.account_id = ? AND g.embed_tenant_id = ?)`
	args := []any{userID, s.AccountID, s.EmbedTenantID}
	if len(groupIDs) == 0 {
		return t.run(ctx, op, del, args...)
	}
	if t.pg() {
		// One statement: the delete and the insert touch disjoint rows.
		return t.run(ctx, op, "WITH removed AS ("+del+" AND group_id NOT IN ?) "+insertMembers,
			append(args, groupIDs, userID, groupIDs, s.AccountID, s.EmbedTenantID)...)
	}
	// SQLite: the list joined, not read by IN (see liteList).
	ids := liteList(groupIDs)
	if _, err := t.exec(ctx, op, del+" AND NOT EXISTS (SELECT 1 FROM json_each(?) WHERE value = embedkit_group_members.group_id)",
		append(args, ids)...); err != nil {
		return err
	}
	_, err := t.exec(ctx, op, `INSERT INTO embedkit_group_members (user_id, group_id)
		SELECT ?, g.id FROM json_each(?) AS j CROSS JOIN embedkit_catalog_groups g
		WHERE g.id = j.value AND g.account_id = ? AND g.embed_tenant_id = ?
		ON CONFLICT (user_id, group_id) DO NOTHING`,
		userID, ids, s.AccountID, s.EmbedTenantID)
	return err
}

func (t *txn) Memberships(ctx context.Context, userID int64, s store.Scope) ([]store.Group, error) {
	var rows groupRows
	if _, err := t.find(ctx, "memberships", &rows,
		`SELECT g.id AS id, g.account_id AS account_id, g.embed_tenant_id AS embed_tenant_id, g.name AS name,
		COALESCE(g.description, '') AS description, g.created_at AS created_at, g.updated_at AS updated_at
		FROM embedkit_group_members m JOIN embedkit_catalog_groups g ON g.id = m.group_id
		WHERE m.user_id = ? AND g.account_id = ? AND g.embed_tenant_id = ?
		ORDER BY g.name`,
		userID, s.AccountID, s.EmbedTenantID); err != nil {
		return nil, err
	}
	return groups(rows), nil
}

type deletedUser struct {
	AccountID  int64
	ExternalID *string
	Ephemeral  bool
}

func (r *deletedUser) dest() []any { return []any{&r.AccountID, &r.ExternalID, &r.Ephemeral} }

func (t *txn) DeleteUser(ctx context.Context, userID int64) error {
	const op = "delete user"
	var row deletedUser
	n, err := t.find(ctx, op, &row, "DELETE FROM embedkit_users WHERE id = ? RETURNING account_id, external_id, ephemeral", userID)
	if err != nil {
		return err
	}
	if n == 0 {
		return newErr(op, store.ErrNotFound)
	}
	if row.ExternalID != nil && !row.Ephemeral {
		if err := t.uncount(ctx, row.AccountID); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) DeleteUnusedUser(ctx context.Context, userID int64, createdAt time.Time) (bool, error) {
	const op = "delete unused user"
	if t.pg() {
		// Wait for a transaction that writes the user (its upsert, or the
		// foreign key check of its new thread or session) to end, so that
		// the next statement's snapshot sees what it committed: under READ
		// COMMITTED, a DELETE that waited for the row would still test
		// NOT EXISTS against its own, older snapshot.
		var id countRow
		if _, err := t.find(ctx, op, &id, "SELECT id FROM embedkit_users WHERE id = ? FOR UPDATE", userID); err != nil {
			return false, err
		}
	}
	var row deletedUser
	n, err := t.find(ctx, op, &row, `DELETE FROM embedkit_users WHERE id = ? AND created_at = ?
		AND NOT EXISTS (SELECT 1 FROM embedkit_threads WHERE user_id = ?)
		AND NOT EXISTS (SELECT 1 FROM embedkit_sessions WHERE user_id = ?)
		AND NOT EXISTS (SELECT 1 FROM embedkit_tokens WHERE user_id = ?)
		RETURNING account_id, external_id, ephemeral`,
		userID, createdAt.UnixNano(), userID, userID, userID)
	if err != nil || n == 0 {
		return false, err
	}
	if row.ExternalID != nil && !row.Ephemeral {
		if err := t.uncount(ctx, row.AccountID); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (t *txn) DeleteExpiredUsers(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	lock := ""
	if t.pg() {
		// Several reapers skip each other's rows instead of waiting.
		lock = " FOR UPDATE SKIP LOCKED"
	}
	n, err := t.exec(ctx, "delete expired users",
		`DELETE FROM embedkit_users WHERE id IN (SELECT id FROM embedkit_users WHERE ephemeral AND expires_at <= ?
		ORDER BY expires_at LIMIT ?`+lock+`)`,
		nowOr(now).UnixNano(), limit)
	return int(n), err
}

// chunks splits s into slices of at most n elements.
func chunks[T any](s []T, n int) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// UpsertExternalUser implements [store.Users] in its own transaction.
func (s *Store) UpsertExternalUser(ctx context.Context, u store.ExternalUserUpsert) (store.User, error) {
	return write(ctx, s, func(t *txn) (store.User, error) { return t.UpsertExternalUser(ctx, u) })
}

// UserByExternalID implements [store.Users].
func (s *Store) UserByExternalID(ctx context.Context, accountID int64, externalID string, now time.Time) (store.User, error) {
	return readPrimary(ctx, s, func(t *txn) (store.User, error) { return t.UserByExternalID(ctx, accountID, externalID, now) })
}

// UserByID implements [store.Users].
func (s *Store) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	return readPrimary(ctx, s, func(t *txn) (store.User, error) { return t.UserByID(ctx, id, now) })
}

// SaveInternalUser implements [store.Users].
func (s *Store) SaveInternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	if u, err := read(ctx, s, func(t *txn) (store.User, error) { return t.InternalUser(ctx, accountID, username) }); err == nil {
		return u, nil
	}
	return write(ctx, s, func(t *txn) (store.User, error) { return t.SaveInternalUser(ctx, accountID, username) })
}

// InternalUser implements [store.Users].
func (s *Store) InternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	return read(ctx, s, func(t *txn) (store.User, error) { return t.InternalUser(ctx, accountID, username) })
}

// SetAttributeValues implements [store.Users] in its own transaction.
func (s *Store) SetAttributeValues(ctx context.Context, userID int64, values []store.AttributeValue) error {
	return write0(ctx, s, func(t *txn) error { return t.SetAttributeValues(ctx, userID, values) })
}

// AttributeValues implements [store.Users].
func (s *Store) AttributeValues(ctx context.Context, userID int64, sc store.Scope) ([]store.UserAttribute, error) {
	return read(ctx, s, func(t *txn) ([]store.UserAttribute, error) { return t.AttributeValues(ctx, userID, sc) })
}

// ReplaceMemberships implements [store.Users] in its own transaction.
func (s *Store) ReplaceMemberships(ctx context.Context, userID int64, sc store.Scope, groupIDs []int64) error {
	return write0(ctx, s, func(t *txn) error { return t.ReplaceMemberships(ctx, userID, sc, groupIDs) })
}

// Memberships implements [store.Users].
func (s *Store) Memberships(ctx context.Context, userID int64, sc store.Scope) ([]store.Group, error) {
	return read(ctx, s, func(t *txn) ([]store.Group, error) { return t.Memberships(ctx, userID, sc) })
}

// DeleteUser implements [store.Users] in its own transaction.
func (s *Store) DeleteUser(ctx context.Context, userID int64) error {
	return write0(ctx, s, func(t *txn) error { return t.DeleteUser(ctx, userID) })
}

// DeleteUnusedUser implements [store.Users] in its own transaction.
func (s *Store) DeleteUnusedUser(ctx context.Context, userID int64, createdAt time.Time) (bool, error) {
	return write(ctx, s, func(t *txn) (bool, error) { return t.DeleteUnusedUser(ctx, userID, createdAt) })
}

// DeleteExpiredUsers implements [store.Users] in its own transaction.
func (s *Store) DeleteExpiredUsers(ctx context.Context, now time.Time, limit int) (int, error) {
	return write(ctx, s, func(t *txn) (int, error) { return t.DeleteExpiredUsers(ctx, now, limit) })
}
