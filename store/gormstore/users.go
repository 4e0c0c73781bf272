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

const visible = "(NOT ephemeral OR expires_at IS NULL OR expires_at > ?)"

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

func byKey(k store.UserKey) func(*gorm.DB) *gorm.DB {
	if k.InternalID != "" {
		return whereSQL("account_id = ? AND internal_id = ?", k.AccountID, k.InternalID)
	}
	return whereSQL("account_id = ? AND external_id = ?", k.AccountID, k.ExternalID)
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
	err = t.atomic(ctx, func(t *txn) error {
		alive := whereSQL(visible, u.now.UnixNano())
		if u.Persistent {
			alive = whereSQL("NOT ephemeral") // converting an ephemeral user takes the rare path
		}
		ok, err := t.updateUser(ctx, u, false, byKey(u.UserKey), alive)
		if err != nil || ok {
			return err
		}
		for range 3 {
			if ok, err := t.insertUser(ctx, u, true); err != nil || ok {
				return err
			}
			// Expired, converted or inserted concurrently.
			row, err := first[User](t, ctx, op, byKey(u.UserKey), func(db *gorm.DB) *gorm.DB {
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
				_, err := t.updateUser(ctx, u, row.Ephemeral && u.Persistent, whereSQL("id = ?", row.ID))
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
	})
	return u.out, err
}

// updateUser applies u to the user where selects, converting it to
// persistent when persist is set, and reports whether a row matched.
func (t *txn) updateUser(ctx context.Context, u *upsertUser, persist bool, where ...func(*gorm.DB) *gorm.DB) (bool, error) {
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
		return db.Model(&row).Scopes(where...).Clauses(clause.Returning{}).Updates(set)
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

// takePlace counts a new or converted user, whatever the limit (a later
// call may have one), in the account's persistent users or the minute's
// new ephemeral users, or returns [store.ErrLimit]: one conditional upsert
// of a counter row, whose row lock makes the limit exact under concurrency.
func (t *txn) takePlace(ctx context.Context, u *upsertUser) error {
	if u.InternalID != "" {
		return nil
	}
	var row any = &AccountUserSlot{AccountID: u.AccountID, N: 1}
	table, claim, max := "embedkit_account_user_slots", "shard", u.MaxUsers
	if minute := u.now.Truncate(time.Minute); !u.Persistent {
		row, table, claim, max = &AccountQuota{AccountID: u.AccountID, N: 1, Name: "new_ephemeral_users:" + strconv.FormatInt(minute.Unix(), 10),
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

func (t *txn) UserByKey(ctx context.Context, k store.UserKey, now time.Time) (store.User, error) {
	row, err := first[User](t, ctx, "user by key", primary, byKey(k), whereSQL(visible, nowOr(now).UnixNano()))
	return row.user(), err
}

func (t *txn) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	row, err := first[User](t, ctx, "user by id", primary, whereSQL("id = ? AND "+visible, id, nowOr(now).UnixNano()))
	return row.user(), err
}

// UserData resolves the IDs of the user's JSON columns against the
// definitions of s, ignoring deleted ones (IDs are never reused), in one
// statement. Hand-written SQL: GORM has no JSON functions or UNION.
func (t *txn) UserData(ctx context.Context, userID int64, s store.Scope) (store.UserData, error) {
	var rows []catalogRow
	_, err := t.do(ctx, "user data", func(db *gorm.DB) *gorm.DB {
		return primary(db).Raw(userData[t.s.pg], s.AccountID, s.EmbedTenantID, userID, s.AccountID, s.EmbedTenantID, strconv.FormatInt(s.EmbedTenantID, 10), userID).Scan(&rows)
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

// userData reads, by t.s.pg, the user's attributes (the value of each:
// the member of attribute_values named by its ID) and groups (the IDs
// listed under the embed tenant's ID in group_ids) that s defines.
var userData = map[bool]string{
	false: fmt.Sprintf(userDataSQL, `u.attribute_values -> ('$."' || d.id || '"')`, "SELECT CAST(j.key AS INTEGER) FROM json_each(u.attribute_values) j",
		`SELECT j.value FROM json_each(u.group_ids, '$."' || ? || '"') j`),
	true: fmt.Sprintf(userDataSQL, "(u.attribute_values::jsonb -> d.id::text)::text", "SELECT k::bigint FROM jsonb_object_keys(u.attribute_values::jsonb) k",
		"SELECT e::bigint FROM jsonb_array_elements_text(u.group_ids::jsonb -> ?) e"),
}

// userDataSQL takes the dialect's expressions of an attribute's value, of
// the attribute IDs and of the group IDs.
const userDataSQL = `SELECT 'a' AS kind, d.id, d.account_id, d.embed_tenant_id, d.name, d.type, d.display_name, d.default_value, d.description, d.created_at, d.updated_at, %s AS value
	FROM embedkit_users u JOIN embedkit_catalog_attributes d ON d.account_id = ? AND d.embed_tenant_id = ? AND d.id IN (%s) WHERE u.id = ?
	UNION ALL SELECT 'g', d.id, d.account_id, d.embed_tenant_id, d.name, '', NULL, NULL, d.description, d.created_at, d.updated_at, NULL
	FROM embedkit_users u JOIN embedkit_catalog_groups d ON d.account_id = ? AND d.embed_tenant_id = ? AND d.id IN (%s) WHERE u.id = ?`

// deleteUser deletes the user with everything it owns (ON DELETE CASCADE)
// and gives back its place in the persistent-user count.
func (t *txn) deleteUser(ctx context.Context, op string, where func(*gorm.DB) *gorm.DB) (int64, error) {
	var row User
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return where(db).Clauses(clause.Returning{Columns: columns("account_id", "external_id", "ephemeral")}).Delete(&row)
	})
	if err == nil && n > 0 && row.ExternalID != nil && !row.Ephemeral {
		_, err = t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Model(&AccountUserSlot{}).Where("account_id = ?", row.AccountID).Update("n", gorm.Expr("n - 1"))
		})
	}
	return n, err
}

func (t *txn) DeleteUser(ctx context.Context, userID int64) error {
	const op = "delete user"
	return t.atomic(ctx, func(t *txn) error {
		n, err := t.deleteUser(ctx, op, whereSQL("id = ?", userID))
		return someRow(op, n, err)
	})
}

func (t *txn) DeleteUnusedUser(ctx context.Context, userID int64, createdAt time.Time) (bool, error) {
	const op = "delete unused user"
	return atomically(t, ctx, func(t *txn) (bool, error) {
		if t.s.pg {
			// Wait for a transaction that writes the user, or gives it a
			// thread or session (its foreign key check holds a KEY SHARE
			// lock, which FOR UPDATE waits for), so that the next
			// statement's snapshot sees what it committed.
			if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
				return db.Model(&User{}).Select("id").Where("id = ?", userID).Clauses(clause.Locking{Strength: "UPDATE"}).Find(&[]int64{})
			}); err != nil {
				return false, err
			}
		}
		n, err := t.deleteUser(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Where(`id = ? AND created_at = ?
				AND NOT EXISTS (SELECT 1 FROM embedkit_threads WHERE user_id = ?)
				AND NOT EXISTS (SELECT 1 FROM embedkit_sessions WHERE user_id = ?)
				AND NOT EXISTS (SELECT 1 FROM embedkit_tokens WHERE user_id = ?)`,
				userID, createdAt.UnixNano(), userID, userID, userID)
		})
		return n > 0, err
	})
}
