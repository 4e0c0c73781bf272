package memstore

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/embedkit/embedkit/store"
)

func copyUser(u store.User) store.User {
	u.SecurityContext = clone(u.SecurityContext)
	return u
}

// expired reports whether u is an ephemeral user whose expiry has passed at
// now. An ephemeral user without an expiry never expires.
func expired(u store.User, now time.Time) bool {
	return u.Ephemeral && !u.ExpiresAt.IsZero() && !u.ExpiresAt.After(now)
}

func (d *db) upsertExternalUser(u store.ExternalUserUpsert) (store.User, error) {
	const op = "upsert external user"
	now := d.now(u.Now)
	key := nameKey{u.AccountID, u.ExternalID}
	if id, ok := d.userByExt[key]; ok {
		old := d.users[id]
		if !expired(old, now) {
			return d.updateExternalUser(old, u, now)
		}
		// An expired ephemeral user is absent: it goes with everything it
		// owns, and a new user takes its external id. It never counted.
		d.deleteUser(id)
	}
	if err := d.needAccount(op, u.AccountID); err != nil {
		return store.User{}, err
	}
	if u.Persistent {
		if err := d.takePlace(u.AccountID, u.MaxUsers); err != nil {
			return store.User{}, err
		}
	}
	d.lastUserID++
	nu := store.User{
		ID:              d.lastUserID,
		AccountID:       u.AccountID,
		ExternalID:      u.ExternalID,
		Email:           deref(u.Email),
		DisplayName:     deref(u.DisplayName),
		Picture:         deref(u.Picture),
		SecurityContext: clone(u.SecurityContext),
		Ephemeral:       !u.Persistent,
		CreatedAt:       now,
		UpdatedAt:       now,
	}
	if !u.Persistent {
		nu.ExpiresAt = norm(u.EphemeralExpiresAt)
		set(d, d.ephemerals, nu.ID, struct{}{})
	}
	set(d, d.users, nu.ID, nu)
	set(d, d.userByExt, key, nu.ID)
	return copyUser(nu), nil
}

func (d *db) updateExternalUser(old store.User, u store.ExternalUserUpsert, now time.Time) (store.User, error) {
	nu := old
	if u.Persistent && old.Ephemeral {
		if err := d.takePlace(u.AccountID, u.MaxUsers); err != nil {
			return store.User{}, err
		}
		nu.Ephemeral, nu.ExpiresAt = false, time.Time{}
		del(d, d.ephemerals, nu.ID)
	}
	if u.Email != nil {
		nu.Email = *u.Email
	}
	if u.DisplayName != nil {
		nu.DisplayName = *u.DisplayName
	}
	if u.Picture != nil {
		nu.Picture = *u.Picture
	}
	if u.SecurityContext != nil {
		nu.SecurityContext = clone(u.SecurityContext)
	}
	nu.UpdatedAt = now
	set(d, d.users, nu.ID, nu)
	return copyUser(nu), nil
}

// takePlace counts one more persistent external user of the account, or
// returns [store.ErrLimit] when it has max already. A max of zero or less
// means no limit.
func (d *db) takePlace(accountID int64, max int) error {
	n := d.persistent[accountID]
	if max > 0 && n >= max {
		return errLimit
	}
	set(d, d.persistent, accountID, n+1)
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// visibleUser returns the user with the ID unless it is missing or expired.
func (d *db) visibleUser(op string, id int64, now time.Time) (store.User, error) {
	u, ok := d.users[id]
	if !ok || expired(u, d.now(now)) {
		return store.User{}, notFound(op)
	}
	return copyUser(u), nil
}

func (d *db) userByExternalID(accountID int64, externalID string, now time.Time) (store.User, error) {
	id, ok := d.userByExt[nameKey{accountID, externalID}]
	if !ok {
		return store.User{}, notFound("user by external id")
	}
	return d.visibleUser("user by external id", id, now)
}

func (d *db) saveInternalUser(accountID int64, username string) (store.User, error) {
	if id, ok := d.userByInt[nameKey{accountID, username}]; ok {
		return copyUser(d.users[id]), nil
	}
	if err := d.needAccount("save internal user", accountID); err != nil {
		return store.User{}, err
	}
	now := d.now(time.Time{})
	d.lastUserID++
	u := store.User{ID: d.lastUserID, AccountID: accountID, InternalID: username, CreatedAt: now, UpdatedAt: now}
	if strings.Contains(username, "@") {
		u.Email = username
	}
	set(d, d.users, u.ID, u)
	set(d, d.userByInt, nameKey{accountID, username}, u.ID)
	return copyUser(u), nil
}

func (d *db) internalUser(accountID int64, username string) (store.User, error) {
	id, ok := d.userByInt[nameKey{accountID, username}]
	if !ok {
		return store.User{}, notFound("internal user")
	}
	return copyUser(d.users[id]), nil
}

func isNullJSON(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

func (d *db) setAttributeValues(userID int64, values []store.AttributeValue) error {
	const op = "set attribute values"
	for _, v := range values {
		if isNullJSON(v.Value) {
			ndel(d, d.values, userID, v.AttributeID)
			ndel(d, d.valueUsers, v.AttributeID, userID)
			continue
		}
		if _, ok := d.users[userID]; !ok {
			return notFound(op + ": user")
		}
		if _, ok := d.attributes[v.AttributeID]; !ok {
			return notFound(op + ": attribute")
		}
		nset(d, d.values, userID, v.AttributeID, clone(v.Value))
		nset(d, d.valueUsers, v.AttributeID, userID, struct{}{})
	}
	return nil
}

func (d *db) attributeValues(userID int64, s store.Scope) ([]store.UserAttribute, error) {
	out := []store.UserAttribute{}
	for attrID, v := range d.values[userID] {
		a := d.attributes[attrID]
		if a.Scope != s {
			continue
		}
		out = append(out, store.UserAttribute{Name: a.Name, Type: a.Type, Value: clone(v)})
	}
	slices.SortFunc(out, func(a, b store.UserAttribute) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

func (d *db) replaceMemberships(userID int64, s store.Scope, groupIDs []int64) error {
	keep := make(map[int64]bool, len(groupIDs))
	for _, id := range groupIDs {
		if g, ok := d.groups[id]; ok && g.Scope == s {
			keep[id] = true
		}
	}
	for _, gid := range sortedKeys(d.members[userID]) {
		if d.groups[gid].Scope == s && !keep[gid] {
			ndel(d, d.members, userID, gid)
			ndel(d, d.groupUsers, gid, userID)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	if _, ok := d.users[userID]; !ok {
		return notFound("replace memberships: user")
	}
	for _, gid := range groupIDs {
		if keep[gid] {
			nset(d, d.members, userID, gid, struct{}{})
			nset(d, d.groupUsers, gid, userID, struct{}{})
		}
	}
	return nil
}

func (d *db) memberships(userID int64, s store.Scope) ([]store.Group, error) {
	out := []store.Group{}
	for gid := range d.members[userID] {
		if g := d.groups[gid]; g.Scope == s {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b store.Group) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

func (d *db) deleteUserChecked(id int64) error {
	if _, ok := d.users[id]; !ok {
		return notFound("delete user")
	}
	d.deleteUser(id)
	return nil
}

// deleteUser deletes an existing user with its attribute values,
// memberships, sessions, tokens, threads and messages, and frees its place
// when it was a persistent external user.
func (d *db) deleteUser(id int64) {
	u := d.users[id]
	for _, aid := range sortedKeys(d.values[id]) {
		ndel(d, d.values, id, aid)
		ndel(d, d.valueUsers, aid, id)
	}
	for _, gid := range sortedKeys(d.members[id]) {
		ndel(d, d.members, id, gid)
		ndel(d, d.groupUsers, gid, id)
	}
	d.revokeUserSessions(id)
	for _, k := range slices.Collect(maps.Keys(d.userThreads[id])) {
		d.deleteThread(k)
	}
	switch {
	case u.ExternalID != "":
		del(d, d.userByExt, nameKey{u.AccountID, u.ExternalID})
		if u.Ephemeral {
			del(d, d.ephemerals, id)
		} else if n := d.persistent[u.AccountID]; n > 0 {
			set(d, d.persistent, u.AccountID, n-1)
		}
	case u.InternalID != "":
		del(d, d.userByInt, nameKey{u.AccountID, u.InternalID})
	}
	del(d, d.users, id)
}

// deleteUnusedUser deletes user id when it was created at createdAt and
// owns no thread, session or token.
func (d *db) deleteUnusedUser(id int64, createdAt time.Time) bool {
	u, ok := d.users[id]
	if !ok || !u.CreatedAt.Equal(createdAt) || len(d.userThreads[id]) > 0 || len(d.userSess[id]) > 0 || len(d.userTokens[id]) > 0 {
		return false
	}
	d.deleteUser(id)
	return true
}

func (d *db) deleteExpiredUsers(now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	now = d.now(now)
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
	return len(due), nil
}

// UpsertExternalUser implements [store.Users]. A new user of an unknown
// account is [store.ErrNotFound]. The limit is exact: the store serializes
// writers.
func (s *Store) UpsertExternalUser(ctx context.Context, u store.ExternalUserUpsert) (store.User, error) {
	return write(s, ctx, func(d *db) (store.User, error) { return d.upsertExternalUser(u) })
}

// UserByExternalID implements [store.Users]. A zero now means the clock's
// time.
func (s *Store) UserByExternalID(ctx context.Context, accountID int64, externalID string, now time.Time) (store.User, error) {
	return read(s, ctx, func(d *db) (store.User, error) { return d.userByExternalID(accountID, externalID, now) })
}

// UserByID implements [store.Users]. A zero now means the clock's time.
func (s *Store) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	return read(s, ctx, func(d *db) (store.User, error) { return d.visibleUser("user by id", id, now) })
}

// SaveInternalUser implements [store.Users]. The email of a username that
// contains "@" is the username. An unknown account is [store.ErrNotFound].
func (s *Store) SaveInternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	return write(s, ctx, func(d *db) (store.User, error) { return d.saveInternalUser(accountID, username) })
}

// InternalUser implements [store.Users].
func (s *Store) InternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	return read(s, ctx, func(d *db) (store.User, error) { return d.internalUser(accountID, username) })
}

// SetAttributeValues implements [store.Users]. Setting a value for an
// unknown user or attribute is [store.ErrNotFound] and changes nothing.
func (s *Store) SetAttributeValues(ctx context.Context, userID int64, values []store.AttributeValue) error {
	return write0(s, ctx, func(d *db) error { return d.setAttributeValues(userID, values) })
}

// AttributeValues implements [store.Users].
func (s *Store) AttributeValues(ctx context.Context, userID int64, sc store.Scope) ([]store.UserAttribute, error) {
	return read(s, ctx, func(d *db) ([]store.UserAttribute, error) { return d.attributeValues(userID, sc) })
}

// ReplaceMemberships implements [store.Users]. IDs of groups outside scope
// sc, or of no group, are ignored; adding a group to an unknown user is
// [store.ErrNotFound].
func (s *Store) ReplaceMemberships(ctx context.Context, userID int64, sc store.Scope, groupIDs []int64) error {
	return write0(s, ctx, func(d *db) error { return d.replaceMemberships(userID, sc, groupIDs) })
}

// Memberships implements [store.Users].
func (s *Store) Memberships(ctx context.Context, userID int64, sc store.Scope) ([]store.Group, error) {
	return read(s, ctx, func(d *db) ([]store.Group, error) { return d.memberships(userID, sc) })
}

// DeleteUser implements [store.Users].
func (s *Store) DeleteUser(ctx context.Context, userID int64) error {
	return write0(s, ctx, func(d *db) error { return d.deleteUserChecked(userID) })
}

// DeleteUnusedUser implements [store.Users].
func (s *Store) DeleteUnusedUser(ctx context.Context, userID int64, createdAt time.Time) (bool, error) {
	return write(s, ctx, func(d *db) (bool, error) { return d.deleteUnusedUser(userID, createdAt), nil })
}

// DeleteExpiredUsers implements [store.Users]; it deletes the users that
// expired first. Its cost grows with the number of ephemeral users.
func (s *Store) DeleteExpiredUsers(ctx context.Context, now time.Time, limit int) (int, error) {
	return write(s, ctx, func(d *db) (int, error) { return d.deleteExpiredUsers(now, limit) })
}

func (t *txView) UpsertExternalUser(ctx context.Context, u store.ExternalUserUpsert) (store.User, error) {
	return call(t, ctx, func(d *db) (store.User, error) { return d.upsertExternalUser(u) })
}

func (t *txView) UserByExternalID(ctx context.Context, accountID int64, externalID string, now time.Time) (store.User, error) {
	return call(t, ctx, func(d *db) (store.User, error) { return d.userByExternalID(accountID, externalID, now) })
}

func (t *txView) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	return call(t, ctx, func(d *db) (store.User, error) { return d.visibleUser("user by id", id, now) })
}

func (t *txView) SaveInternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	return call(t, ctx, func(d *db) (store.User, error) { return d.saveInternalUser(accountID, username) })
}

func (t *txView) InternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	return call(t, ctx, func(d *db) (store.User, error) { return d.internalUser(accountID, username) })
}

func (t *txView) SetAttributeValues(ctx context.Context, userID int64, values []store.AttributeValue) error {
	return call0(t, ctx, func(d *db) error { return d.setAttributeValues(userID, values) })
}

func (t *txView) AttributeValues(ctx context.Context, userID int64, sc store.Scope) ([]store.UserAttribute, error) {
	return call(t, ctx, func(d *db) ([]store.UserAttribute, error) { return d.attributeValues(userID, sc) })
}

func (t *txView) ReplaceMemberships(ctx context.Context, userID int64, sc store.Scope, groupIDs []int64) error {
	return call0(t, ctx, func(d *db) error { return d.replaceMemberships(userID, sc, groupIDs) })
}

func (t *txView) Memberships(ctx context.Context, userID int64, sc store.Scope) ([]store.Group, error) {
	return call(t, ctx, func(d *db) ([]store.Group, error) { return d.memberships(userID, sc) })
}

func (t *txView) DeleteUser(ctx context.Context, userID int64) error {
	return call0(t, ctx, func(d *db) error { return d.deleteUserChecked(userID) })
}

func (t *txView) DeleteUnusedUser(ctx context.Context, userID int64, createdAt time.Time) (bool, error) {
	return call(t, ctx, func(d *db) (bool, error) { return d.deleteUnusedUser(userID, createdAt), nil })
}

func (t *txView) DeleteExpiredUsers(ctx context.Context, now time.Time, limit int) (int, error) {
	return call(t, ctx, func(d *db) (int, error) { return d.deleteExpiredUsers(now, limit) })
}
