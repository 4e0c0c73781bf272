package memstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
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

func (d *db) upsertUser(u store.UserUpsert) (store.User, error) {
	const op = "upsert user"
	now := d.now(u.Now)
	if (u.ExternalID == "") == (u.InternalID == "") {
		return store.User{}, fmt.Errorf("memstore: %s: the key must name exactly one of an external and an internal id", op)
	}
	byKey, key := d.userByExt, nameKey{u.AccountID, u.ExternalID}
	if u.InternalID != "" {
		byKey, key = d.userByInt, nameKey{u.AccountID, u.InternalID}
	}
	var nu store.User
	if id, ok := byKey[key]; ok && !expired(d.users[id], now) {
		var err error
		if nu, err = d.updateUser(d.users[id], u, now); err != nil {
			return store.User{}, err
		}
	} else {
		if ok {
			// An expired ephemeral user is absent: it goes with everything
			// it owns, and a new user takes its key. It never counted.
			d.deleteUser(id)
		}
		if err := d.needAccount(op, u.AccountID); err != nil {
			return store.User{}, err
		}
		external := u.ExternalID != ""
		ephemeral := external && !u.Persistent
		switch {
		case ephemeral:
			if err := d.countEphemeral(u.AccountID, now, u.NewEphemeralPerMinute); err != nil {
				return store.User{}, err
			}
		case external:
			if err := d.takePlace(u.AccountID, u.MaxUsers); err != nil {
				return store.User{}, err
			}
		}
		d.lastUserID++
		nu = store.User{
			ID:              d.lastUserID,
			AccountID:       u.AccountID,
			ExternalID:      u.ExternalID,
			InternalID:      u.InternalID,
			Email:           deref(u.Email),
			DisplayName:     deref(u.DisplayName),
			Picture:         deref(u.Picture),
			SecurityContext: clone(u.SecurityContext),
			Ephemeral:       ephemeral,
			CreatedAt:       now,
			UpdatedAt:       now,
		}
		if ephemeral {
			nu.ExpiresAt = norm(u.EphemeralExpiresAt)
			set(d, d.ephemerals, nu.ID, struct{}{})
		}
		set(d, d.users, nu.ID, nu)
		set(d, byKey, key, nu.ID)
	}
	d.setAttributeValues(nu.ID, u.Attributes)
	if u.SetGroups {
		d.replaceMemberships(nu.ID, u.GroupScope, u.Groups)
	}
	if ns := u.Session; ns != nil {
		sess := ns.Session
		sess.UserID = nu.ID
		if err := d.createSession(ns.Hash, sess); err != nil {
			return store.User{}, err
		}
	}
	return copyUser(nu), nil
}

// updateUser applies u to the visible user old and stores the result.
func (d *db) updateUser(old store.User, u store.UserUpsert, now time.Time) (store.User, error) {
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
	return nu, nil
}

// takePlace counts one more persistent external user of the account, or
// returns [store.ErrLimit] when it has max already. A max of zero or less
// means no limit.
func (d *db) takePlace(accountID int64, max int) error {
	n := d.persistent[accountID]
	if max > 0 && n >= max {
		return fmt.Errorf("memstore: upsert user: %d persistent external users: %w", n, store.ErrLimit)
	}
	set(d, d.persistent, accountID, n+1)
	return nil
}

// countEphemeral counts one more ephemeral user created in the clock
// minute of now, or returns [store.ErrLimit] when max were counted in it
// already. A max of zero or less means no limit, and nothing is counted.
func (d *db) countEphemeral(accountID int64, now time.Time, max int) error {
	if max <= 0 {
		return nil // no limit: nothing to count
	}
	k := minuteKey{accountID, now.Truncate(time.Minute)}
	n := d.ephemeralCounts[k]
	if n >= max {
		return fmt.Errorf("memstore: upsert user: %d ephemeral users created this minute: %w", n, store.ErrLimit)
	}
	set(d, d.ephemeralCounts, k, n+1)
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

func (d *db) userByKey(k store.UserKey, now time.Time) (store.User, error) {
	byKey, name := d.userByExt, k.ExternalID
	if k.InternalID != "" {
		byKey, name = d.userByInt, k.InternalID
	}
	id, ok := byKey[nameKey{k.AccountID, name}]
	if !ok || (k.ExternalID == "") == (k.InternalID == "") {
		return store.User{}, notFound("user by key")
	}
	return d.visibleUser("user by key", id, now)
}

func isNullJSON(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

// setAttributeValues sets or clears the values of the existing user.
func (d *db) setAttributeValues(userID int64, values []store.AttributeValue) {
	for _, v := range values {
		if isNullJSON(v.Value) {
			ndel(d, d.values, userID, v.AttributeID)
			ndel(d, d.valueUsers, v.AttributeID, userID)
			continue
		}
		if _, ok := d.attributes[v.AttributeID]; !ok {
			continue // deleted since the caller looked it up: never read
		}
		nset(d, d.values, userID, v.AttributeID, clone(v.Value))
		nset(d, d.valueUsers, v.AttributeID, userID, struct{}{})
	}
}

// userData returns the values and groups of scope sc of the user.
func (d *db) userData(userID int64, sc store.Scope) (store.UserData, error) {
	out := store.UserData{Attributes: []store.UserAttribute{}, Groups: []store.Group{}}
	for attrID, v := range d.values[userID] {
		if a := d.attributes[attrID]; a.Scope == sc {
			out.Attributes = append(out.Attributes, store.UserAttribute{Name: a.Name, Type: a.Type, Value: clone(v)})
		}
	}
	slices.SortFunc(out.Attributes, func(a, b store.UserAttribute) int { return cmp.Compare(a.Name, b.Name) })
	for gid := range d.members[userID] {
		if g := d.groups[gid]; g.Scope == sc {
			out.Groups = append(out.Groups, g)
		}
	}
	slices.SortFunc(out.Groups, func(a, b store.Group) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// replaceMemberships makes the groups of scope sc among groupIDs exactly
// the user's groups within sc; IDs of groups outside sc, or of no group,
// are ignored.
func (d *db) replaceMemberships(userID int64, sc store.Scope, groupIDs []int64) {
	keep := make(map[int64]bool, len(groupIDs))
	for _, id := range groupIDs {
		if g, ok := d.groups[id]; ok && g.Scope == sc {
			keep[id] = true
		}
	}
	for _, gid := range sortedKeys(d.members[userID]) {
		if d.groups[gid].Scope == sc && !keep[gid] {
			ndel(d, d.members, userID, gid)
			ndel(d, d.groupUsers, gid, userID)
		}
	}
	for _, gid := range groupIDs {
		if keep[gid] {
			nset(d, d.members, userID, gid, struct{}{})
			nset(d, d.groupUsers, gid, userID, struct{}{})
		}
	}
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

// UpsertUser implements [store.Users]. A new user of an unknown account,
// or a value of an unknown attribute, is [store.ErrNotFound]; IDs in Groups
// that name no group of GroupScope are ignored; a Value of JSON null
// clears like a nil one. The limits are exact: the store serializes
// writers.
func (s *Store) UpsertUser(ctx context.Context, u store.UserUpsert) (store.User, error) {
	return write(s, ctx, func(d *db) (store.User, error) { return d.upsertUser(u) })
}

// UserByKey implements [store.Users]. A zero now means the clock's time.
func (s *Store) UserByKey(ctx context.Context, k store.UserKey, now time.Time) (store.User, error) {
	return read(s, ctx, func(d *db) (store.User, error) { return d.userByKey(k, now) })
}

// UserByID implements [store.Users]. A zero now means the clock's time.
func (s *Store) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	return read(s, ctx, func(d *db) (store.User, error) { return d.visibleUser("user by id", id, now) })
}

// UserData implements [store.Users].
func (s *Store) UserData(ctx context.Context, userID int64, sc store.Scope) (store.UserData, error) {
	return read(s, ctx, func(d *db) (store.UserData, error) { return d.userData(userID, sc) })
}

// DeleteUser implements [store.Users].
func (s *Store) DeleteUser(ctx context.Context, userID int64) error {
	return write0(s, ctx, func(d *db) error { return d.deleteUserChecked(userID) })
}

func (t *txView) UpsertUser(ctx context.Context, u store.UserUpsert) (store.User, error) {
	return call(t, ctx, func(d *db) (store.User, error) { return d.upsertUser(u) })
}

func (t *txView) UserByKey(ctx context.Context, k store.UserKey, now time.Time) (store.User, error) {
	return call(t, ctx, func(d *db) (store.User, error) { return d.userByKey(k, now) })
}

func (t *txView) UserByID(ctx context.Context, id int64, now time.Time) (store.User, error) {
	return call(t, ctx, func(d *db) (store.User, error) { return d.visibleUser("user by id", id, now) })
}

func (t *txView) UserData(ctx context.Context, userID int64, sc store.Scope) (store.UserData, error) {
	return call(t, ctx, func(d *db) (store.UserData, error) { return d.userData(userID, sc) })
}

func (t *txView) DeleteUser(ctx context.Context, userID int64) error {
	return call0(t, ctx, func(d *db) error { return d.deleteUserChecked(userID) })
}
