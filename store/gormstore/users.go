package gormstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/embedkit/embedkit/store"
)

// A user, or a row's user, that is not an expired ephemeral user.
const (
	visible   = "(NOT ephemeral OR expires_at IS NULL OR expires_at > ?)"
	userAlive = "EXISTS (SELECT 1 FROM embedkit_users u WHERE u.id = user_id AND (NOT u.ephemeral OR u.expires_at IS NULL OR u.expires_at > ?))"
	// keyAlive holds for a session or token whose API key is not revoked.
	// Revoking deletes them too (ON DELETE CASCADE); checked here as well,
	// so that revocation holds on a SQLite connection whose foreign keys
	// a host left off.
	keyAlive = "(key_hash IS NULL OR EXISTS (SELECT 1 FROM embedkit_api_keys k WHERE k.hash = key_hash))"
)

func (r User) user() store.User {
	u := store.User{ID: r.ID, AccountID: r.AccountID, Email: r.Email, DisplayName: r.DisplayName, Picture: r.Picture,
		ExternalID: str(r.ExternalID), InternalID: str(r.InternalID), Ephemeral: r.Ephemeral,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt)}
	if r.SecurityContext != nil {
		u.SecurityContext = json.RawMessage(*r.SecurityContext)
	}
	if r.ExpiresAt != nil && r.Ephemeral {
		u.ExpiresAt = fromNanos(*r.ExpiresAt)
	}
	return u
}

func keyIs(k store.UserKey) clause.Expr {
	if k.InternalID != "" {
		return gorm.Expr("account_id = ? AND internal_id = ?", k.AccountID, k.InternalID)
	}
	return gorm.Expr("account_id = ? AND external_id = ?", k.AccountID, k.ExternalID)
}

// upsertUser is an UpsertUser with the JSON objects it merges into
// attribute_values and group_ids (nil: no change), a null clearing a key.
type upsertUser struct {
	store.UserUpsert
	attrs, groups   []byte
	securityContext *string // nil: no change
	now             time.Time
	out             store.User
}

// UpsertUser costs what docs/storage.md says; the rare cases (an expired
// user to replace, a conversion, a concurrent first insert) read the row
// under a lock and take more.
func (t *txn) UpsertUser(ctx context.Context, req store.UserUpsert) (store.User, error) {
	const op = "upsert user"
	u := &upsertUser{UserUpsert: req, now: nowOr(req.Now)}
	u.Persistent = u.Persistent || u.InternalID != ""
	if u.SecurityContext != nil {
		u.securityContext = new(string(u.SecurityContext))
	}
	var err error
	if len(u.Attributes) > 0 {
		m := make(map[string]json.RawMessage, len(u.Attributes))
		for _, a := range u.Attributes {
			m[strconv.FormatInt(a.AttributeID, 10)] = append(json.RawMessage(nil), a.Value...) // nil if empty: null clears
		}
		if u.attrs, err = json.Marshal(m); err != nil {
			return store.User{}, t.fail(wrapErr(op, err))
		}
	}
	if u.SetGroups {
		ids := slices.Compact(slices.Sorted(slices.Values(u.Groups))) // nil for none: null clears
		u.groups, _ = json.Marshal(map[string][]int64{strconv.FormatInt(u.GroupScope.EmbedTenantID, 10): ids})
	}
	alive := gorm.Expr(visible, u.now.UnixNano())
	if u.Persistent {
		alive = gorm.Expr("NOT ephemeral") // converting an ephemeral user takes the rare path
	}
	returning := clause.And(keyIs(u.UserKey), alive)
	if !t.inTx && t.s.pg { // a returning user's UPDATE alone is atomic: no BEGIN and COMMIT round trips
		var ok bool
		err := t.s.retry(ctx, func() (err error) { ok, err = t.updateUser(ctx, u, false, returning); return err })
		if err != nil || ok {
			return u.out, err
		}
		returning = nil // tried
	}
	err = t.atomic(ctx, func(t *txn) error {
		if err := t.upsertUser(ctx, u, returning); err != nil || u.Session == nil {
			return err
		}
		s := u.Session.Session
		s.UserID = u.out.ID
		return t.CreateSession(ctx, u.Session.Hash, s)
	})
	return u.out, err
}

// upsertUser is UpsertUser in a transaction; returning selects the returning
// user to update first, nil when that was tried already.
func (t *txn) upsertUser(ctx context.Context, u *upsertUser, returning clause.Expression) error {
	const op = "upsert user"
	if returning != nil {
		if ok, err := t.updateUser(ctx, u, false, returning); err != nil || ok {
			return err
		}
	}
	for range 3 {
		if ok, err := t.insertUser(ctx, u, true); err != nil || ok {
			return err
		}
		// Expired, converted or inserted concurrently.
		row, err := first[User](t, ctx, op, whereSQL(keyIs(u.UserKey)), func(db *gorm.DB) *gorm.DB {
			if t.s.pg { // SQLite's writers are serialized already
				db = db.Clauses(clause.Locking{Strength: "UPDATE"})
			}
			return db
		})
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		} else if err != nil {
			return err
		}
		expired := row.Ephemeral && row.ExpiresAt != nil && *row.ExpiresAt <= u.now.UnixNano()
		if expired || row.Ephemeral && u.Persistent {
			// The place first, so that ErrLimit changes nothing.
			if err := t.takePlace(ctx, u); err != nil {
				return err
			}
		}
		if !expired {
			_, err := t.updateUser(ctx, u, row.Ephemeral && u.Persistent, gorm.Expr("id = ?", row.ID))
			return err
		}
		// Absent: replace it with everything it owns.
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Delete(&User{}, row.ID) }); err != nil {
			return err
		}
		if ok, err := t.insertUser(ctx, u, false); err != nil || ok {
			return err
		}
		break
	}
	return t.fail(wrapErr(op, store.ErrConflict))
}

// updateUser applies u to the user where selects, converting it to
// persistent when persist is set, and reports whether a row matched.
func (t *txn) updateUser(ctx context.Context, u *upsertUser, persist bool, where clause.Expression) (bool, error) {
	set := map[string]any{"updated_at": u.now.UnixNano()}
	profile := map[string]*string{"email": u.Email, "display_name": u.DisplayName, "picture": u.Picture, "security_context": u.securityContext}
	for col, v := range profile {
		if v != nil {
			set[col] = *v
		}
	}
	// Merged per dialect (GORM has no JSON expressions); a null member removes its key.
	for col, patch := range map[string][]byte{"attribute_values": u.attrs, "group_ids": u.groups} {
		switch {
		case patch == nil:
		case t.s.pg:
			set[col] = gorm.Expr("jsonb_strip_nulls("+col+"::jsonb || ?::jsonb)::text", string(patch))
		default:
			set[col] = gorm.Expr("json_patch("+col+", ?)", string(patch))
		}
	}
	if persist {
		set["ephemeral"], set["expires_at"] = false, nil
	}
	var row User
	n, err := t.do(ctx, "upsert user", func(db *gorm.DB) *gorm.DB {
		ns := u.Session
		if ns == nil || t.inTx {
			return db.Model(&row).Where(where).Clauses(clause.Returning{}).Updates(set)
		}
		// Outside a transaction (PostgreSQL's returning user), the session's
		// INSERT goes with the UPDATE in one atomic statement, which GORM
		// cannot write: a data-modifying WITH.
		return db.Raw(`WITH u AS (UPDATE embedkit_users ? WHERE ? RETURNING *), s AS (INSERT INTO embedkit_sessions (hash, account_id,
			user_id, deployment_id, embed_tenant_id, embed_tenant_name, creator_mode, created_at, expires_at, key_hash)
			SELECT ?, u.account_id, u.id, ?, ?, ?, ?, ?, ?, ? FROM u) SELECT * FROM u`, clause.Assignments(set), where, ns.Hash, ns.Session.DeploymentID, ns.Session.EmbedTenantID, ns.Session.EmbedTenantName,
			ns.Session.CreatorMode, nowOr(ns.Session.CreatedAt).UnixNano(), ns.Session.ExpiresAt.UnixNano(), keyHash(ns.Session.KeyHash)).Find(&row)
	})
	if n > 0 {
		u.out = row.user()
	}
	return n > 0, err
}

// withoutNulls is patch without its null members: a new user's object.
func withoutNulls(patch []byte) string {
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(patch, &m) // nil, or marshalled from a map
	maps.DeleteFunc(m, func(_ string, v json.RawMessage) bool { return bytes.Equal(v, []byte("null")) })
	b, _ := json.Marshal(m)
	return string(b)
}

// insertUser creates the user unless one exists (false, nothing changed)
// and, when take is set, takes its place or deletes the row again.
func (t *txn) insertUser(ctx context.Context, u *upsertUser, take bool) (bool, error) {
	const op = "upsert user"
	now := u.now.UnixNano()
	row := User{AccountID: u.AccountID, Ephemeral: !u.Persistent, CreatedAt: now, UpdatedAt: now, Email: str(u.Email),
		DisplayName: str(u.DisplayName), Picture: str(u.Picture), SecurityContext: u.securityContext,
		AttributeValues: withoutNulls(u.attrs), GroupIDs: withoutNulls(u.groups)}
	conflict := "external_id"
	if u.InternalID != "" {
		row.InternalID, conflict = &u.InternalID, "internal_id"
	} else {
		row.ExternalID = &u.ExternalID
	}
	if !u.Persistent && !u.EphemeralExpiresAt.IsZero() { // NULL: never expires
		row.ExpiresAt = new(u.EphemeralExpiresAt.UnixNano())
	}
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Clauses(clause.OnConflict{Columns: columns("account_id", conflict), DoNothing: true}, clause.Returning{}).Create(&row)
	})
	if err != nil || n == 0 {
		return false, err
	}
	if take {
		if err := t.takePlace(ctx, u); err != nil {
			_, derr := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Delete(&User{}, row.ID) })
			return false, cmp.Or(derr, err)
		}
	}
	u.out = row.user()
	return true, nil
}

// takePlace counts a new or converted user in the account's persistent
// users or (under a limit) the minute's new ephemeral users, or returns
// [store.ErrLimit]: one conditional upsert of a counter row, whose lock makes the limit exact.
func (t *txn) takePlace(ctx context.Context, u *upsertUser) error {
	if u.InternalID != "" || !u.Persistent && u.NewEphemeralPerMinute <= 0 {
		return nil
	}
	var row any = &AccountUserSlot{AccountID: u.AccountID, N: 1}
	table, claim, max := "embedkit_account_user_slots", "shard", u.MaxUsers
	if minute := u.now.Truncate(time.Minute); !u.Persistent {
		row, table, claim, max = &AccountQuota{AccountID: u.AccountID, N: 1, Name: ephemeralQuota(minute),
			ExpiresAt: minute.Add(time.Minute).UnixNano()}, "embedkit_account_quotas", "name", u.NewEphemeralPerMinute
	}
	up := clause.OnConflict{Columns: columns("account_id", claim), DoUpdates: clause.Set{{Column: clause.Column{Name: "n"}, Value: gorm.Expr(table + ".n + 1")}}}
	if max > 0 {
		up.Where = clause.Where{Exprs: []clause.Expression{gorm.Expr(table+".n < ?", max)}}
	}
	n, err := t.do(ctx, "upsert user", func(db *gorm.DB) *gorm.DB { return db.Select("*").Clauses(up).Create(row) })
	if err == nil && n == 0 {
		return wrapErr("upsert user", store.ErrLimit)
	}
	return err
}

func ephemeralQuota(t time.Time) string { // the count of the new ephemeral users of t's minute
	return fmt.Sprint("new_ephemeral_users:", t.Truncate(time.Minute).Unix())
}

func (t *txn) UserByKey(ctx context.Context, k store.UserKey, now time.Time) (store.User, error) {
	row, err := first[User](t, ctx, "user by key", primary, whereSQL(keyIs(k)), whereSQL(visible, nowOr(now).UnixNano()))
	return row.user(), err
}

func (t *txn) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	row, err := first[User](t, ctx, "user by id", primary, whereSQL("id = ? AND "+visible, id, nowOr(now).UnixNano()))
	return row.user(), err
}

// UserData resolves the IDs of the user's JSON columns against the definitions of s,
// ignoring deleted ones, in one statement (GORM has no JSON functions or UNION).
func (t *txn) UserData(ctx context.Context, userID int64, s store.Scope) (store.UserData, error) {
	var rows []catalogRow
	_, err := t.do(ctx, "user data", func(db *gorm.DB) *gorm.DB {
		return primary(db).Raw(userData[t.s.pg], userID, s.AccountID, s.EmbedTenantID, strconv.FormatInt(s.EmbedTenantID, 10), userID, s.AccountID, s.EmbedTenantID).Find(&rows)
	})
	var out store.UserData
	for _, r := range rows {
		var v bytes.Buffer
		switch {
		case r.Kind == "g":
			out.Groups = append(out.Groups, r.group())
		case r.Value != nil && json.Compact(&v, []byte(*r.Value)) == nil:
			out.Attributes = append(out.Attributes, store.UserAttribute{Name: r.Name, Type: store.AttributeType(r.Type), Value: v.Bytes()})
		}
	}
	// By bytes, as on every adapter, whatever the database's collation.
	slices.SortFunc(out.Attributes, func(a, b store.UserAttribute) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Groups, func(a, b store.Group) int { return cmp.Compare(a.Name, b.Name) })
	return out, err
}

// userData reads, by t.s.pg, the user's attributes (attribute_values, by
// definition ID) and groups (the IDs under the embed tenant's ID in
// group_ids) that s defines, each ID looked up by primary key (CROSS JOIN
// fixes SQLite's join order; a correlated IN (...) was several times slower).
var userData = map[bool]string{
	false: fmt.Sprintf(userDataSQL, "json_each(u.attribute_values) j", `u.attribute_values -> ('$."' || j.key || '"')`, "CAST(j.key AS INTEGER)",
		`json_each(u.group_ids, '$."' || ? || '"') j`, "j.value"),
	true: fmt.Sprintf(userDataSQL, "jsonb_object_keys(u.attribute_values::jsonb) j(k)", "(u.attribute_values::jsonb -> j.k)::text", "j.k::bigint",
		"jsonb_array_elements_text(u.group_ids::jsonb -> ?) j(v)", "j.v::bigint"),
}

const userDataSQL = `SELECT 'a' AS kind, d.id, d.account_id, d.embed_tenant_id, d.name, d.type, d.display_name, d.default_value, d.description, d.created_at, d.updated_at, %[2]s AS value
	FROM embedkit_users u CROSS JOIN %[1]s CROSS JOIN embedkit_catalog_attributes d WHERE u.id = ? AND d.id = %[3]s AND d.account_id = ? AND d.embed_tenant_id = ?
	UNION ALL SELECT 'g', d.id, d.account_id, d.embed_tenant_id, d.name, '', NULL, NULL, d.description, d.created_at, d.updated_at, NULL
	FROM embedkit_users u CROSS JOIN %[4]s CROSS JOIN embedkit_catalog_groups d WHERE u.id = ? AND d.id = %[5]s AND d.account_id = ? AND d.embed_tenant_id = ?`

// DeleteUser deletes the user with everything it owns (ON DELETE CASCADE)
// and gives a persistent user's place back to the persistent-user count.
func (t *txn) DeleteUser(ctx context.Context, userID int64) error {
	const op = "delete user"
	return t.atomic(ctx, func(t *txn) error {
		var row User
		n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Where("id = ?", userID).Clauses(clause.Returning{Columns: columns("account_id", "external_id", "ephemeral")}).Delete(&row)
		})
		if err == nil && n > 0 && row.ExternalID != nil && !row.Ephemeral {
			_, err = t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
				return db.Model(&AccountUserSlot{}).Where("account_id = ?", row.AccountID).Update("n", gorm.Expr("n - 1"))
			})
		}
		return someRow(op, n, err)
	})
}

func (t *txn) CreateSession(ctx context.Context, hash []byte, s store.Session) error {
	_, err := t.write(ctx, "create session", func(db *gorm.DB) *gorm.DB {
		return db.Create(&Session{Hash: hash, AccountID: s.AccountID, UserID: s.UserID, DeploymentID: s.DeploymentID,
			EmbedTenantID: s.EmbedTenantID, EmbedTenantName: s.EmbedTenantName, CreatorMode: s.CreatorMode,
			CreatedAt: nowOr(s.CreatedAt).UnixNano(), ExpiresAt: s.ExpiresAt.UnixNano(), KeyHash: keyHash(s.KeyHash)})
	})
	return err
}

// keyHash is nil for no key, not a key with an empty hash.
func keyHash(h []byte) []byte {
	if len(h) == 0 {
		return nil
	}
	return h
}

// ExchangeSession marks the session used (a concurrent exchange waits for
// the UPDATE, then finds it used) and stores the token.
func (t *txn) ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error) {
	const op = "exchange session"
	n0 := nowOr(now).UnixNano()
	return atomically(t, ctx, func(t *txn) (store.Session, error) {
		var s Session
		n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Model(&s).Clauses(clause.Returning{}).
				Where("hash = ? AND used_at IS NULL AND expires_at > ? AND "+userAlive+" AND "+keyAlive, sessionHash, n0, n0).
				Update("used_at", n0)
		})
		if err := someRow(op, n, err); err != nil {
			return store.Session{}, err
		}
		tok := Token{Hash: tokenHash, AccountID: s.AccountID, UserID: s.UserID, DeploymentID: s.DeploymentID,
			EmbedTenantID: s.EmbedTenantID, EmbedTenantName: s.EmbedTenantName, CreatorMode: s.CreatorMode,
			CreatedAt: n0, ExpiresAt: tokenExpiresAt.UnixNano(), KeyHash: s.KeyHash}
		_, err = t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Create(&tok) })
		return tok.session(), err
	})
}

func (r Token) session() store.Session {
	return store.Session{AccountID: r.AccountID, UserID: r.UserID, DeploymentID: r.DeploymentID,
		EmbedTenantID: r.EmbedTenantID, EmbedTenantName: r.EmbedTenantName, CreatorMode: r.CreatorMode,
		CreatedAt: fromNanos(r.CreatedAt), ExpiresAt: fromNanos(r.ExpiresAt), KeyHash: r.KeyHash}
}

func (t *txn) SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error) {
	n0 := nowOr(now).UnixNano()
	row, err := first[Token](t, ctx, "session by token", primary, whereSQL("hash = ? AND expires_at > ? AND "+userAlive+" AND "+keyAlive, tokenHash, n0, n0))
	return row.session(), err
}

func (t *txn) RevokeUserSessions(ctx context.Context, userID int64) error {
	return t.atomic(ctx, func(t *txn) (err error) {
		for _, model := range []any{&Session{}, &Token{}} {
			if err == nil {
				_, err = t.do(ctx, "revoke sessions", func(db *gorm.DB) *gorm.DB { return db.Where("user_id = ?", userID).Delete(model) })
			}
		}
		return err
	})
}

// DeleteExpired deletes at most limit rows of each kind, chosen by a
// subquery (PostgreSQL's DELETE has no LIMIT) and checked again by the
// DELETE, which on PostgreSQL sees what a concurrent writer committed (a
// user converted to persistent meanwhile stays). On PostgreSQL the
// subquery skips the rows another transaction holds (FOR UPDATE SKIP
// LOCKED): reapers on several replicas take different rows rather than
// waiting for each other.
func (t *txn) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n0 := nowOr(now).UnixNano()
	return atomically(t, ctx, func(t *txn) (int, error) {
		total := 0
		for _, k := range []struct {
			model      any
			key, where string
		}{
			{&Session{}, "hash", "expires_at <= ? OR used_at IS NOT NULL"}, {&Token{}, "hash", "expires_at <= ?"},
			{&AccountQuota{}, "account_id, name", "expires_at <= ?"}, {&User{}, "id", "ephemeral AND expires_at <= ?"},
		} {
			n, err := t.do(ctx, "delete expired", func(db *gorm.DB) *gorm.DB {
				sub := db.Session(&gorm.Session{NewDB: true}).Model(k.model).Select(k.key).Where(k.where, n0).Limit(limit)
				if t.s.pg {
					sub = sub.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked})
				}
				return db.Where("("+k.key+") IN (?)", sub).Where(k.where, n0).Delete(k.model)
			})
			if err != nil {
				return 0, err
			}
			total += int(n)
		}
		return total, nil
	})
}

// messageBatch keeps the parameters of one INSERT below drivers' limits.
const messageBatch = 500

func (t *txn) putMessages(ctx context.Context, op string, accountID int64, chatID string, msgs []store.ThreadMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	rows := convert(msgs, func(m store.ThreadMessage) ThreadMessage {
		return ThreadMessage{AccountID: accountID, ChatID: chatID, ID: m.ID, Sort: m.Sort, Body: string(m.Body)}
	})
	_, err := t.write(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Clauses(upsert([]string{"account_id", "chat_id", "id"}, "sort", "body")).CreateInBatches(&rows, messageBatch)
	})
	return err
}

func (t *txn) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	const op = "create thread"
	created := nowOr(th.CreatedAt)
	row := Thread{AccountID: th.AccountID, ChatID: th.ChatID, AgentID: th.AgentID, UserID: th.UserID, LastSort: th.LastSort,
		CreatedAt: created.UnixNano(), UpdatedAt: cmp.Or(th.UpdatedAt, created).UnixNano()}
	if t.s.pg && len(msgs) == 1 {
		// A new chat's opening: one statement, atomic without BEGIN and COMMIT
		// round trips of its own (GORM cannot put an INSERT in a WITH clause).
		_, err := t.write(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Exec(`WITH th AS (INSERT INTO embedkit_threads (account_id, chat_id, agent_id, user_id, last_sort, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING account_id, chat_id) INSERT INTO embedkit_thread_messages (account_id, chat_id, id, sort, body)
				SELECT account_id, chat_id, ?, ?, ? FROM th`, row.AccountID, row.ChatID, row.AgentID, row.UserID, row.LastSort, row.CreatedAt,
				row.UpdatedAt, msgs[0].ID, msgs[0].Sort, string(msgs[0].Body))
		})
		return err
	}
	return t.atomic(ctx, func(t *txn) error {
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Omit(clause.Associations).Create(&row) }); err != nil {
			return err
		}
		return t.putMessages(ctx, op, th.AccountID, th.ChatID, msgs)
	})
}

func (t *txn) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	r, err := first[Thread](t, ctx, "thread", primary, whereSQL("account_id = ? AND chat_id = ?", accountID, chatID))
	return store.Thread{AccountID: r.AccountID, ChatID: r.ChatID, AgentID: r.AgentID, UserID: r.UserID, LastSort: r.LastSort,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt)}, err
}

func (t *txn) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	const op = "append messages"
	if lastSort <= 0 && len(msgs) > 0 && len(msgs) <= messageBatch {
		return t.putMessages(ctx, op, accountID, chatID, msgs) // one statement, a write of its own
	}
	return t.atomic(ctx, func(t *txn) error {
		// The thread's row is written only when lastSort rises (0: the stored
		// mark covers the write); a missing thread fails the messages' foreign key.
		var n int64
		var err error
		if lastSort > 0 {
			n, err = t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
				return db.Model(&Thread{}).Where("account_id = ? AND chat_id = ? AND last_sort < ?", accountID, chatID, lastSort).
					Updates(map[string]any{"last_sort": lastSort, "updated_at": time.Now().UnixNano()})
			})
		}
		if err == nil && n == 0 && len(msgs) == 0 {
			_, err = t.Thread(ctx, accountID, chatID)
		}
		if err != nil {
			return err
		}
		return t.putMessages(ctx, op, accountID, chatID, msgs)
	})
}

func (t *txn) Messages(ctx context.Context, accountID int64, chatID string) ([]store.ThreadMessage, error) {
	return list(t, ctx, "messages", func(r ThreadMessage) store.ThreadMessage {
		return store.ThreadMessage{ID: r.ID, Sort: r.Sort, Body: json.RawMessage(r.Body)}
	}, "sort, id", primary, whereSQL("account_id = ? AND chat_id = ?", accountID, chatID))
}
