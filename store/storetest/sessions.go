package storetest

import (
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var sessionRules = []rule{
	{
		name: "UpsertUser with a Session stores the user and the session id, both or neither",
		doc:  "A new or returning user's upsert with Session stores the session for that user (whatever Session.UserID says), on the store and in a transaction; a KeyHash naming no stored key is ErrNotFound and neither the user's change nor the session is stored.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: []byte("key"), AccountID: f.account.ID}))
			et, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one", 0)
			mustNil(t, "EnsureEmbedTenant", err)
			upsert := func(tx store.Tx, ext, name, key, hash string) (store.User, error) {
				up := f.upsert(ext)
				up.DisplayName = &name
				up.Session = &store.NewSession{Hash: []byte(hash), Session: store.Session{
					AccountID: f.account.ID, UserID: 999999, DeploymentID: f.deploy.ID, EmbedTenantID: et.ID,
					EmbedTenantName: et.Name, CreatorMode: true, CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute), KeyHash: []byte(key)}}
				return tx.UpsertUser(ctx(t), up)
			}
			inTx := func(ext, name, key, hash string) (u store.User, err error) {
				err = st.InTx(ctx(t), func(tx store.Tx) (err error) { u, err = upsert(tx, ext, name, key, hash); return err })
				return u, err
			}
			exchange := func(hash string, u store.User) {
				t.Helper()
				g, err := st.ExchangeSession(ctx(t), []byte(hash), []byte("tok-"+hash), t0.Add(time.Hour), t0)
				mustNil(t, "ExchangeSession of "+hash, err)
				if g.UserID != u.ID || g.EmbedTenantID != et.ID || g.EmbedTenantName != et.Name || !g.CreatorMode || string(g.KeyHash) != "key" {
					t.Errorf("grant of %s = %+v, want user %d in %+v with key", hash, g, u.ID, et)
				}
			}
			for _, via := range []struct {
				name string
				call func(ext, name, key, hash string) (store.User, error)
			}{
				{"store", func(ext, name, key, hash string) (store.User, error) { return upsert(st, ext, name, key, hash) }},
				{"InTx", inTx},
			} {
				ext := "u-" + via.name
				u, err := via.call(ext, "New", "key", via.name+"-new")
				mustNil(t, via.name+": UpsertUser of a new user with a session", err)
				exchange(via.name+"-new", u)
				again, err := via.call(ext, "Back", "key", via.name+"-back")
				mustNil(t, via.name+": UpsertUser of a returning user with a session", err)
				if again.ID != u.ID || again.DisplayName != "Back" {
					t.Errorf("%s: returning user = %+v, want user %d named Back", via.name, again, u.ID)
				}
				exchange(via.name+"-back", u)

				_, err = via.call(ext, "Gone", "deleted-key", via.name+"-gone")
				wantErr(t, via.name+": returning user, key missing", err, store.ErrNotFound)
				_, err = via.call(ext+"-2", "Gone", "deleted-key", via.name+"-gone2")
				wantErr(t, via.name+": new user, key missing", err, store.ErrNotFound)
				got, err := st.UserByKey(ctx(t), u.Key(), t0)
				mustNil(t, "UserByKey", err)
				if got.DisplayName != "Back" {
					t.Errorf("%s: a refused upsert changed the user's name to %q", via.name, got.DisplayName)
				}
				_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: ext + "-2"}, t0)
				wantErr(t, via.name+": user of a refused upsert", err, store.ErrNotFound)
				for _, h := range []string{"-gone", "-gone2"} {
					_, err = st.ExchangeSession(ctx(t), []byte(via.name+h), []byte("t"+via.name+h), t0.Add(time.Hour), t0)
					wantErr(t, via.name+": session of a refused upsert", err, store.ErrNotFound)
				}
			}
		},
	},
	{
		name: "ExchangeSession trades a session id for a token once",
		doc:  "A session id is single use; the exchange returns the grant with the token's expiry, the token then resolves to the same grant, and a second exchange is ErrNotFound.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			et, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one", 0)
			mustNil(t, "EnsureEmbedTenant", err)
			want := store.Session{
				AccountID: f.account.ID, UserID: u.ID, DeploymentID: f.deploy.ID,
				EmbedTenantID: et.ID, EmbedTenantName: et.Name, CreatorMode: true,
				CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute),
			}
			mustNil(t, "CreateSession", st.CreateSession(ctx(t), []byte("sess"), want))
			tokExp := t0.Add(24 * time.Hour)
			got, err := st.ExchangeSession(ctx(t), []byte("sess"), []byte("tok"), tokExp, t0.Add(time.Minute))
			mustNil(t, "ExchangeSession", err)
			if got.AccountID != want.AccountID || got.UserID != u.ID || got.DeploymentID != f.deploy.ID ||
				got.EmbedTenantID != et.ID || got.EmbedTenantName != et.Name || !got.CreatorMode || !got.ExpiresAt.Equal(tokExp) {
				t.Errorf("grant = %+v, want %+v with ExpiresAt %v", got, want, tokExp)
			}
			byTok, err := st.SessionByToken(ctx(t), []byte("tok"), t0.Add(time.Hour))
			mustNil(t, "SessionByToken", err)
			if byTok.UserID != u.ID || byTok.EmbedTenantName != et.Name || !byTok.ExpiresAt.Equal(tokExp) || !byTok.CreatorMode {
				t.Errorf("SessionByToken = %+v", byTok)
			}
			_, err = st.ExchangeSession(ctx(t), []byte("sess"), []byte("tok2"), tokExp, t0.Add(time.Minute))
			wantErr(t, "second exchange", err, store.ErrNotFound)
			_, err = st.SessionByToken(ctx(t), []byte("tok2"), t0)
			wantErr(t, "token of a failed exchange", err, store.ErrNotFound)
		},
	},
	{
		name: "DeleteAPIKey ends the session ids and tokens the key minted",
		doc:  "A session records the key that minted it (KeyHash) and its token carries it; deleting the key makes both ErrNotFound, leaves other keys' and keyless sessions alone, and a session naming a deleted key cannot be created.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			for _, k := range []string{"key-a", "key-b"} {
				mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: []byte(k), AccountID: f.account.ID}))
			}
			grant := func(key string) store.Session {
				g := store.Session{AccountID: f.account.ID, UserID: u.ID, DeploymentID: f.deploy.ID, CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute)}
				if key != "" {
					g.KeyHash = []byte(key)
				}
				return g
			}
			tokExp := t0.Add(24 * time.Hour)
			for _, key := range []string{"key-a", "key-b", ""} {
				mustNil(t, "CreateSession", st.CreateSession(ctx(t), []byte("s1"+key), grant(key)))
				mustNil(t, "CreateSession", st.CreateSession(ctx(t), []byte("s2"+key), grant(key)))
				g, err := st.ExchangeSession(ctx(t), []byte("s1"+key), []byte("t"+key), tokExp, t0)
				mustNil(t, "ExchangeSession", err)
				if string(g.KeyHash) != key {
					t.Errorf("exchanged grant's KeyHash = %q, want %q", g.KeyHash, key)
				}
			}
			mustNil(t, "DeleteAPIKey", st.DeleteAPIKey(ctx(t), f.account.ID, []byte("key-a")))
			_, err := st.SessionByToken(ctx(t), []byte("tkey-a"), t0)
			wantErr(t, "token of the deleted key", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("s2key-a"), []byte("t2key-a"), tokExp, t0)
			wantErr(t, "session id of the deleted key", err, store.ErrNotFound)
			for _, key := range []string{"key-b", ""} {
				g, err := st.SessionByToken(ctx(t), []byte("t"+key), t0)
				mustNil(t, "token of another key", err)
				if string(g.KeyHash) != key {
					t.Errorf("token's KeyHash = %q, want %q", g.KeyHash, key)
				}
				_, err = st.ExchangeSession(ctx(t), []byte("s2"+key), []byte("t2"+key), tokExp, t0)
				mustNil(t, "session id of another key", err)
			}
			err = st.CreateSession(ctx(t), []byte("s3"), grant("key-a"))
			wantErr(t, "session of a deleted key", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("s3"), []byte("t3"), tokExp, t0)
			wantErr(t, "exchange of the refused session", err, store.ErrNotFound)
		},
	},
	{
		name: "unknown and expired session ids are ErrNotFound",
		doc:  "A session id is usable until its ExpiresAt (exclusive); an unknown or expired one is ErrNotFound and stores no token.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			exp := t0.Add(5 * time.Minute)
			f.session(t, st, u.ID, "s1", exp)
			f.session(t, st, u.ID, "s2", exp)
			_, err := st.ExchangeSession(ctx(t), []byte("nope"), []byte("t0"), exp.Add(time.Hour), t0)
			wantErr(t, "unknown", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("s1"), []byte("t1"), exp.Add(time.Hour), exp)
			wantErr(t, "at expiry", err, store.ErrNotFound)
			_, err = st.SessionByToken(ctx(t), []byte("t1"), t0)
			wantErr(t, "token of expired session", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("s2"), []byte("t2"), exp.Add(time.Hour), exp.Add(-time.Nanosecond))
			mustNil(t, "just before expiry", err)
		},
	},
	{
		name: "tokens expire",
		doc:  "SessionByToken is ErrNotFound from the token's ExpiresAt on, and for unknown tokens.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			f.session(t, st, u.ID, "s", t0.Add(time.Minute))
			tokExp := t0.Add(time.Hour)
			_, err := st.ExchangeSession(ctx(t), []byte("s"), []byte("t"), tokExp, t0)
			mustNil(t, "ExchangeSession", err)
			_, err = st.SessionByToken(ctx(t), []byte("t"), tokExp.Add(-time.Nanosecond))
			mustNil(t, "before expiry", err)
			_, err = st.SessionByToken(ctx(t), []byte("t"), tokExp)
			wantErr(t, "at expiry", err, store.ErrNotFound)
			_, err = st.SessionByToken(ctx(t), []byte("unknown"), t0)
			wantErr(t, "unknown", err, store.ErrNotFound)
		},
	},
	{
		name: "RevokeUserSessions ends every session id and token of a user",
		doc:  "After RevokeUserSessions the user's unused session ids cannot be exchanged and its tokens are unknown; other users keep theirs.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u, other := f.user(t, st, "u"), f.user(t, st, "other")
			for _, h := range []string{"a", "b"} {
				f.session(t, st, u.ID, "s-"+h, t0.Add(time.Hour))
			}
			f.session(t, st, other.ID, "s-other", t0.Add(time.Hour))
			_, err := st.ExchangeSession(ctx(t), []byte("s-a"), []byte("t-a"), t0.Add(time.Hour), t0)
			mustNil(t, "ExchangeSession", err)
			_, err = st.ExchangeSession(ctx(t), []byte("s-other"), []byte("t-other"), t0.Add(time.Hour), t0)
			mustNil(t, "ExchangeSession other", err)
			mustNil(t, "RevokeUserSessions", st.RevokeUserSessions(ctx(t), u.ID))
			_, err = st.SessionByToken(ctx(t), []byte("t-a"), t0)
			wantErr(t, "revoked token", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("s-b"), []byte("t-b"), t0.Add(time.Hour), t0)
			wantErr(t, "revoked session id", err, store.ErrNotFound)
			_, err = st.SessionByToken(ctx(t), []byte("t-other"), t0)
			mustNil(t, "other user's token", err)
			mustNil(t, "revoke with nothing left", st.RevokeUserSessions(ctx(t), u.ID))
		},
	},
	{
		name: "sessions of an expired ephemeral user are dead",
		doc:  "A user that is invisible (expired ephemeral) grants nothing: its session ids cannot be exchanged and its tokens are ErrNotFound from the user's expiry on.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			exp := t0.Add(10 * time.Minute)
			u := f.ephemeral(t, st, "e", exp)
			f.session(t, st, u.ID, "s1", exp.Add(time.Hour))
			f.session(t, st, u.ID, "s2", exp.Add(time.Hour))
			_, err := st.ExchangeSession(ctx(t), []byte("s1"), []byte("t1"), exp.Add(24*time.Hour), t0)
			mustNil(t, "ExchangeSession", err)
			_, err = st.SessionByToken(ctx(t), []byte("t1"), exp)
			wantErr(t, "token after user expiry", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("s2"), []byte("t2"), exp.Add(24*time.Hour), exp)
			wantErr(t, "exchange after user expiry", err, store.ErrNotFound)
		},
	},
	{
		name: "a session for a missing user is ErrNotFound",
		doc:  "CreateSession references a user; an unknown user ID is reported as ErrNotFound, not stored.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			err := st.CreateSession(ctx(t), []byte("s"), store.Session{AccountID: f.account.ID, UserID: 987654, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
			wantErr(t, "CreateSession", err, store.ErrNotFound)
		},
	},
	{
		name: "duplicate session hash is ErrConflict",
		doc:  "Session ids are random; a second CreateSession with the same hash is a clash reported as ErrConflict.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			f.session(t, st, u.ID, "dup", t0.Add(time.Hour))
			err := st.CreateSession(ctx(t), []byte("dup"), store.Session{AccountID: f.account.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
			wantErr(t, "CreateSession duplicate", err, store.ErrConflict)
		},
	},
}
