package gormstore

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/embedkit/embedkit/store"
)

var forUpdate = clause.Locking{Strength: "UPDATE"}

// visible is the predicate of a user that has not expired at the bound time.
const visible = "(NOT ephemeral OR expires_at IS NULL OR expires_at > ?)"

func (r User) user() store.User {
	u := store.User{ID: r.ID, AccountID: r.AccountID, Email: r.Email, DisplayName: r.DisplayName, Picture: r.Picture,
		Ephemeral: r.Ephemeral, CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt)}
	if r.ExternalID != nil {
		u.ExternalID = *r.ExternalID
	}
	if r.InternalID != nil {
		u.InternalID = *r.InternalID
	}
	if r.SecurityContext != nil {
		u.SecurityContext = json.RawMessage(*r.SecurityContext)
	}
	if r.ExpiresAt != nil && r.Ephemeral {
		u.ExpiresAt = fromNanos(*r.ExpiresAt)
	}
	return u
}

// byKey selects the user k names.
func byKey(db *gorm.DB, k store.UserKey) *gorm.DB {
	if k.InternalID != "" {
		return db.Where("account_id = ? AND internal_id = ?", k.AccountID, k.InternalID)
	}
	return db.Where("account_id = ? AND external_id = ?", k.AccountID, k.ExternalID)
}

// mergeJSON is the expression that merges the JSON object patch into the
// JSON object of column col, a null member of patch removing the member.
// Hand-written per dialect: GORM has no JSON expressions. PostgreSQL
// merges as jsonb and stores the text.
func (t *txn) mergeJSON(col string, patch []byte) clause.Expr {
	if t.s.pg {
		return gorm.Expr("jsonb_strip_nulls("+col+"::jsonb || ?::jsonb)::text", string(patch))
	}
	return gorm.Expr("json_patch("+col+", ?)", string(patch))
}

// patches returns the JSON objects that u merges into the user's
// attribute_values and group_ids (nil when u changes neither): attribute
// IDs to values, a null value clearing one; the scope's embed tenant ID
// to its group IDs, null when there are none.
func patches(u store.UserUpsert) (attrs, groups []byte, err error) {
	if len(u.Attributes) > 0 {
		m := make(map[string]json.RawMessage, len(u.Attributes))
		for _, a := range u.Attributes {
			m[strconv.FormatInt(a.AttributeID, 10)] = a.Value
		}
		if attrs, err = json.Marshal(m); err != nil {
			return nil, nil, err
		}
	}
	if u.SetGroups {
		ids := slices.Compact(slices.Sorted(slices.Values(u.Groups)))
		var v any = ids
		if len(ids) == 0 {
			v = nil
		}
		if groups, err = json.Marshal(map[string]any{strconv.FormatInt(u.GroupScope.EmbedTenantID, 10): v}); err != nil {
			return nil, nil, err
		}
	}
	return attrs, groups, nil
}

// withoutNulls is a JSON object patch with its null members removed: the
// stored object of a new user.
func withoutNulls(patch []byte) (string, error) {
	if patch == nil {
		return "{}", nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(patch, &m); err != nil {
		return "", err
	}
	for k, v := range m {
		if bytes.Equal(v, []byte("null")) {
			delete(m, k)
		}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// UpsertUser costs one statement for a returning user: an UPDATE of the
// user's profile and JSON columns, conditioned on the user being visible
// and not converted from ephemeral to persistent, that returns the row. A
// new user costs three: that UPDATE, an INSERT ... ON CONFLICT DO NOTHING
// RETURNING, and the upsert that takes a place of the account's
// persistent-user count or of the minute's new ephemeral users. The rare
// cases (an expired ephemeral user to replace, a conversion to persistent,
// a concurrent first insert) read the row under a lock and take more.
func (t *txn) UpsertUser(ctx context.Context, u store.UserUpsert) (store.User, error) {
	const op = "upsert user"
	attrs, groups, err := patches(u)
	if err != nil {
		return store.User{}, wrapErr(op, err)
	}
	now := nowOr(u.Now)
	if u.InternalID != "" {
		u.Persistent = true
	}
	var out store.User
	err = t.atomic(ctx, func(t *txn) error {
		cond, arg := visible, any(now.UnixNano())
		if u.Persistent {
			cond, arg = "NOT ephemeral", nil
		}
		ok, err := t.updateUser(ctx, u, attrs, groups, now, &out, func(db *gorm.DB) *gorm.DB {
			if arg == nil {
				return byKey(db, u.UserKey).Where(cond)
			}
			return byKey(db, u.UserKey).Where(cond, arg)
		}, false)
		if err != nil || ok {
			return err
		}
		for range 3 {
			ok, err := t.insertUser(ctx, u, attrs, groups, now, &out)
			if err != nil || ok {
				return err
			}
			// The user exists but the UPDATE did not apply: it expired,
			// is converted to persistent, or was inserted concurrently.
			var row User
			n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
				return t.lockForUpdate(byKey(db, u.UserKey)).Limit(1).Find(&row)
			})
			if err != nil {
				return err
			}
			if n == 0 {
				continue // deleted meanwhile
			}
			byID := func(db *gorm.DB) *gorm.DB { return db.Where("id = ?", row.ID) }
			switch {
			case row.Ephemeral && row.ExpiresAt != nil && *row.ExpiresAt <= now.UnixNano():
				// Absent: replace it, taking the new user's place first
				// so that ErrLimit changes nothing.
				if err := t.takePlace(ctx, u, now); err != nil {
					return err
				}
				if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return byID(db).Delete(&User{}) }); err != nil {
					return err
				}
				ok, err := t.insertUser(ctx, u, attrs, groups, now, &out)
				if err == nil && !ok {
					err = newErr(op, store.ErrConflict)
				}
				return err
			case row.Ephemeral && u.Persistent:
				if err := t.takePlace(ctx, u, now); err != nil {
					return err
				}
				_, err := t.updateUser(ctx, u, attrs, groups, now, &out, byID, true)
				return err
			default:
				_, err := t.updateUser(ctx, u, attrs, groups, now, &out, byID, false)
				return err
			}
		}
		return t.fail(newErr(op, store.ErrConflict))
	})
	return out, err
}

// fail makes err abort the transaction.
func (t *txn) fail(err error) error {
	if t.inTx {
		t.abort = err
	}
	return err
}

// updateUser applies u to the user where selects, converting it to
// persistent when persist is set, and reports whether a row matched.
func (t *txn) updateUser(ctx context.Context, u store.UserUpsert, attrs, groups []byte, now time.Time, out *store.User,
	where func(*gorm.DB) *gorm.DB, persist bool) (bool, error) {
	set := map[string]any{"updated_at": now.UnixNano()}
	for col, v := range map[string]*string{"email": u.Email, "display_name": u.DisplayName, "picture": u.Picture} {
		if v != nil {
			set[col] = *v
		}
	}
	if u.SecurityContext != nil {
		set["security_context"] = string(u.SecurityContext)
	}
	if attrs != nil {
		set["attribute_values"] = t.mergeJSON("attribute_values", attrs)
	}
	if groups != nil {
		set["group_ids"] = t.mergeJSON("group_ids", groups)
	}
	if persist {
		set["ephemeral"], set["expires_at"] = false, nil
	}
	var row User
	n, err := t.do(ctx, "upsert user", func(db *gorm.DB) *gorm.DB {
		return where(db.Model(&row)).Clauses(clause.Returning{}).Updates(set)
	})
	if n > 0 {
		*out = row.user()
	}
	return n > 0, err
}

// insertUser creates the user unless one exists (ok false, nothing
// changed), and takes its place (see takePlace), deleting the row again
// when there is none.
func (t *txn) insertUser(ctx context.Context, u store.UserUpsert, attrs, groups []byte, now time.Time, out *store.User) (bool, error) {
	const op = "upsert user"
	row := User{AccountID: u.AccountID, Ephemeral: !u.Persistent, CreatedAt: now.UnixNano(), UpdatedAt: now.UnixNano(),
		Email: str(u.Email), DisplayName: str(u.DisplayName), Picture: str(u.Picture)}
	conflict := []string{"account_id", "external_id"}
	if u.InternalID != "" {
		row.InternalID, conflict[1] = &u.InternalID, "internal_id"
	} else {
		row.ExternalID = &u.ExternalID
	}
	if !u.Persistent {
		exp := u.EphemeralExpiresAt.UnixNano()
		row.ExpiresAt = &exp
	}
	if u.SecurityContext != nil {
		sc := string(u.SecurityContext)
		row.SecurityContext = &sc
	}
	var err error
	if row.AttributeValues, err = withoutNulls(attrs); err != nil {
		return false, wrapErr(op, err)
	}
	if row.GroupIDs, err = withoutNulls(groups); err != nil {
		return false, wrapErr(op, err)
	}
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Clauses(clause.OnConflict{Columns: columns(conflict...), DoNothing: true}, clause.Returning{}).Create(&row)
	})
	if err != nil || n == 0 {
		return false, err
	}
	if err := t.takePlace(ctx, u, now); err != nil {
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Delete(&User{}, row.ID) }); err != nil {
			return false, err
		}
		return false, err
	}
	*out = row.user()
	return true, nil
}

// takePlace takes, for a new or converted user, a place of the account's
// persistent external users (counted whatever the limit) or of the
// minute's new ephemeral users, or returns [store.ErrLimit]. Each is one
// conditional upsert of a counter row, whose row lock makes it exact under
// concurrency on PostgreSQL.
func (t *txn) takePlace(ctx context.Context, u store.UserUpsert, now time.Time) error {
	const op = "upsert user"
	var n int64
	var err error
	switch {
	case u.InternalID != "":
		return nil
	case u.Persistent:
		up := upsert([]string{"account_id", "shard"})
		up.DoUpdates = clause.Set{{Column: clause.Column{Name: "n"}, Value: gorm.Expr("embedkit_account_user_slots.n + 1")}}
		if u.MaxUsers > 0 {
			up.Where = clause.Where{Exprs: []clause.Expression{gorm.Expr("embedkit_account_user_slots.n < ?", u.MaxUsers)}}
		}
		n, err = t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Select("*").Clauses(up).Create(&AccountUserSlot{AccountID: u.AccountID, N: 1})
		})
	case u.NewEphemeralPerMinute > 0:
		minute := now.Truncate(time.Minute)
		up := upsert([]string{"account_id", "name"})
		up.DoUpdates = clause.Set{{Column: clause.Column{Name: "n"}, Value: gorm.Expr("embedkit_account_quotas.n + 1")}}
		up.Where = clause.Where{Exprs: []clause.Expression{gorm.Expr("embedkit_account_quotas.n < ?", u.NewEphemeralPerMinute)}}
		n, err = t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Clauses(up).Create(&AccountQuota{AccountID: u.AccountID, N: 1,
				Name: "new_ephemeral_users:" + strconv.FormatInt(minute.Unix(), 10), ExpiresAt: minute.Add(time.Minute).UnixNano()})
		})
	default:
		return nil
	}
	if err == nil && n == 0 {
		err = newErr(op, store.ErrLimit)
	}
	return err
}

func (t *txn) userWhere(ctx context.Context, op string, now time.Time, where func(*gorm.DB) *gorm.DB) (store.User, error) {
	var row User
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return where(db).Where(visible, nowOr(now).UnixNano()).Limit(1).Find(&row)
	})
	if err != nil {
		return store.User{}, err
	}
	if n == 0 {
		return store.User{}, newErr(op, store.ErrNotFound)
	}
	return row.user(), nil
}

func (t *txn) UserByKey(ctx context.Context, k store.UserKey, now time.Time) (store.User, error) {
	return t.userWhere(ctx, "user by key", now, func(db *gorm.DB) *gorm.DB { return byKey(db, k) })
}

func (t *txn) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	return t.userWhere(ctx, "user by id", now, func(db *gorm.DB) *gorm.DB { return db.Where("id = ?", id) })
}

// UserData reads the user's JSON columns and resolves their IDs against
// the definitions of s that exist: the IDs of deleted definitions are
// ignored (IDs are never reused: AUTOINCREMENT on SQLite, sequences on
// PostgreSQL).
func (t *txn) UserData(ctx context.Context, userID int64, s store.Scope) (store.UserData, error) {
	const op = "user data"
	var row User
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Select("attribute_values", "group_ids").Where("id = ?", userID).Limit(1).Find(&row)
	})
	if err != nil || n == 0 {
		return store.UserData{}, err
	}
	var values map[string]json.RawMessage
	var groupIDs map[string][]int64
	if err := json.Unmarshal([]byte(row.AttributeValues), &values); err != nil {
		return store.UserData{}, wrapErr(op, err)
	}
	if err := json.Unmarshal([]byte(row.GroupIDs), &groupIDs); err != nil {
		return store.UserData{}, wrapErr(op, err)
	}
	var out store.UserData
	if len(values) > 0 {
		ids := make([]int64, 0, len(values))
		for k := range values {
			if id, err := strconv.ParseInt(k, 10, 64); err == nil {
				ids = append(ids, id)
			}
		}
		var defs []CatalogAttribute
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return inScope(db, s).Where("id IN ?", ids).Order("name").Find(&defs)
		}); err != nil {
			return store.UserData{}, err
		}
		for _, d := range defs {
			v := values[strconv.FormatInt(d.ID, 10)]
			var b bytes.Buffer
			if json.Compact(&b, v) == nil {
				v = b.Bytes()
			}
			out.Attributes = append(out.Attributes, store.UserAttribute{Name: d.Name, Type: store.AttributeType(d.Type), Value: v})
		}
	}
	if ids := groupIDs[strconv.FormatInt(s.EmbedTenantID, 10)]; len(ids) > 0 {
		var defs []CatalogGroup
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return inScope(db, s).Where("id IN ?", ids).Order("name").Find(&defs)
		}); err != nil {
			return store.UserData{}, err
		}
		for _, d := range defs {
			out.Groups = append(out.Groups, d.group())
		}
	}
	return out, nil
}

// deleteUser deletes the user where selects with everything it owns (ON
// DELETE CASCADE) and gives back its place in the persistent-user count.
func (t *txn) deleteUser(ctx context.Context, op string, where func(*gorm.DB) *gorm.DB) (bool, error) {
	var row User
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return where(db).Clauses(clause.Returning{Columns: columns("account_id", "external_id", "ephemeral")}).Delete(&row)
	})
	if err != nil || n == 0 {
		return false, err
	}
	if row.ExternalID != nil && !row.Ephemeral {
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Model(&AccountUserSlot{}).Where("account_id = ?", row.AccountID).Update("n", gorm.Expr("n - 1"))
		}); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (t *txn) DeleteUser(ctx context.Context, userID int64) error {
	const op = "delete user"
	return t.atomic(ctx, func(t *txn) error {
		ok, err := t.deleteUser(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Where("id = ?", userID) })
		if err == nil && !ok {
			err = newErr(op, store.ErrNotFound)
		}
		return err
	})
}

func (t *txn) DeleteUnusedUser(ctx context.Context, userID int64, createdAt time.Time) (bool, error) {
	const op = "delete unused user"
	var deleted bool
	err := t.atomic(ctx, func(t *txn) error {
		if t.s.pg {
			// Wait for a transaction that writes the user, or gives it
			// a thread or session (its foreign key check holds a KEY
			// SHARE lock of the row, which FOR UPDATE waits for), to
			// end, so that the next statement's snapshot sees what it
			// committed.
			if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
				return db.Model(&User{}).Select("id").Where("id = ?", userID).Clauses(forUpdate).Find(&[]int64{})
			}); err != nil {
				return err
			}
		}
		var err error
		deleted, err = t.deleteUser(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Where(`id = ? AND created_at = ?
				AND NOT EXISTS (SELECT 1 FROM embedkit_threads WHERE user_id = ?)
				AND NOT EXISTS (SELECT 1 FROM embedkit_sessions WHERE user_id = ?)
				AND NOT EXISTS (SELECT 1 FROM embedkit_tokens WHERE user_id = ?)`,
				userID, createdAt.UnixNano(), userID, userID, userID)
		})
		return err
	})
	return deleted, err
}
