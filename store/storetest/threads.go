package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/embedkit/embedkit/store"
)

var threadRules = []rule{
	{
		name: "CreateThread keys threads by account and chat id",
		doc:  "A thread is keyed by (account, chatId): a second CreateThread of the key is ErrConflict; another account may use the same chatId; a missing thread is ErrNotFound. A thread created with CreatedAt and no UpdatedAt was last updated when it was created.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			u, ou := f.user(t, st, "u"), other.user(t, st, "u")
			th := store.Thread{AccountID: f.account.ID, ChatID: "chat-1", AgentID: "7", UserID: u.ID, CreatedAt: t0, UpdatedAt: t0}
			mustNil(t, "CreateThread", st.CreateThread(ctx(t), th))
			wantErr(t, "CreateThread duplicate", st.CreateThread(ctx(t), th), store.ErrConflict)
			mustNil(t, "CreateThread other account", st.CreateThread(ctx(t), store.Thread{AccountID: other.account.ID, ChatID: "chat-1", AgentID: "9", UserID: ou.ID, CreatedAt: t0}))
			got, err := st.Thread(ctx(t), f.account.ID, "chat-1")
			mustNil(t, "Thread", err)
			if got.AgentID != "7" || got.UserID != u.ID || got.LastSort != 0 || !got.CreatedAt.Equal(t0) {
				t.Errorf("thread = %+v", got)
			}
			_, err = st.Thread(ctx(t), f.account.ID, "chat-2")
			wantErr(t, "Thread missing", err, store.ErrNotFound)
			got, err = st.Thread(ctx(t), other.account.ID, "chat-1")
			mustNil(t, "Thread of the other account", err)
			if !got.UpdatedAt.Equal(t0) {
				t.Errorf("a thread created at %v without UpdatedAt was updated at %v", t0, got.UpdatedAt)
			}
		},
	},
	{
		name: "CreateThread stores the thread's first messages",
		doc:  "CreateThread with messages stores the thread with its LastSort and the messages, as AppendMessages would; a duplicate thread, or one whose user is missing, stores none of its messages.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			th := store.Thread{AccountID: f.account.ID, ChatID: "c", AgentID: "7", UserID: u.ID, LastSort: 20, CreatedAt: t0, UpdatedAt: t0}
			body := json.RawMessage(`{"id":"a","content":"hi"}`)
			mustNil(t, "CreateThread", st.CreateThread(ctx(t), th, store.ThreadMessage{ID: "a", Sort: 1, Body: body}))
			copy(body, `{"id":"x"`) // the store keeps no reference to a body
			wantErr(t, "CreateThread duplicate", st.CreateThread(ctx(t), th, store.ThreadMessage{ID: "z", Sort: 2, Body: json.RawMessage(`{}`)}), store.ErrConflict)
			orphan := store.Thread{AccountID: f.account.ID, ChatID: "orphan", AgentID: "7", UserID: u.ID + 1000, CreatedAt: t0}
			wantErr(t, "CreateThread of a missing user", st.CreateThread(ctx(t), orphan, store.ThreadMessage{ID: "o", Sort: 1, Body: body}), store.ErrNotFound)
			_, err := st.Thread(ctx(t), f.account.ID, "orphan")
			wantErr(t, "thread of a missing user", err, store.ErrNotFound)
			got, err := st.Thread(ctx(t), f.account.ID, "c")
			mustNil(t, "Thread", err)
			if got.LastSort != 20 || !got.UpdatedAt.Equal(t0) {
				t.Errorf("thread = %+v, want LastSort 20 and UpdatedAt %v", got, t0)
			}
			msgs, err := st.Messages(ctx(t), f.account.ID, "c")
			mustNil(t, "Messages", err)
			if len(msgs) != 1 || msgs[0].ID != "a" || msgs[0].Sort != 1 || !jsonEqual(msgs[0].Body, json.RawMessage(`{"id":"a","content":"hi"}`)) {
				t.Errorf("messages = %+v, want only a", msgs)
			}
		},
	},
	{
		name: "AppendMessages upserts by id and only raises LastSort",
		doc:  "Messages are keyed by id within a thread (a later append replaces one); Messages returns them ordered by sort; LastSort becomes max(LastSort, lastSort); an unknown thread is ErrNotFound.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			mustNil(t, "CreateThread", st.CreateThread(ctx(t), store.Thread{AccountID: f.account.ID, ChatID: "c", AgentID: "7", UserID: u.ID, CreatedAt: t0}))
			mustNil(t, "append", st.AppendMessages(ctx(t), f.account.ID, "c", 10, []store.ThreadMessage{
				{ID: "b", Sort: 5, Body: json.RawMessage(`{"id":"b","content":"hi"}`)},
				{ID: "a", Sort: 1, Body: json.RawMessage(`{"id":"a"}`)},
			}))
			mustNil(t, "append lower", st.AppendMessages(ctx(t), f.account.ID, "c", 4, []store.ThreadMessage{
				{ID: "b", Sort: 5, Body: json.RawMessage(`{"id":"b","content":"hello"}`)},
				{ID: "c", Sort: 3, Body: json.RawMessage(`{"id":"c"}`)},
			}))
			th, err := st.Thread(ctx(t), f.account.ID, "c")
			mustNil(t, "Thread", err)
			if th.LastSort != 10 {
				t.Errorf("LastSort = %d, want 10 (never lowered)", th.LastSort)
			}
			mustNil(t, "append higher", st.AppendMessages(ctx(t), f.account.ID, "c", 12, nil))
			th, _ = st.Thread(ctx(t), f.account.ID, "c")
			if th.LastSort != 12 {
				t.Errorf("LastSort = %d, want 12", th.LastSort)
			}
			msgs, err := st.Messages(ctx(t), f.account.ID, "c")
			mustNil(t, "Messages", err)
			ids := names(msgs, func(m store.ThreadMessage) string { return m.ID })
			if !slices.Equal(ids, []string{"a", "c", "b"}) {
				t.Fatalf("message ids = %v, want [a c b] (by sort)", ids)
			}
			if !jsonEqual(msgs[2].Body, json.RawMessage(`{"id":"b","content":"hello"}`)) || msgs[2].Sort != 5 {
				t.Errorf("replaced message = %s sort %d", msgs[2].Body, msgs[2].Sort)
			}
			err = st.AppendMessages(ctx(t), f.account.ID, "nope", 1, []store.ThreadMessage{{ID: "x", Sort: 1, Body: json.RawMessage(`{}`)}})
			wantErr(t, "AppendMessages unknown thread", err, store.ErrNotFound)
			msgs, err = st.Messages(ctx(t), f.account.ID, "nope")
			mustNil(t, "Messages of unknown thread", err)
			if len(msgs) != 0 {
				t.Errorf("unknown thread has messages %v", msgs)
			}
		},
	},
	{
		name: "AppendMessages and CreateThread store many messages at once",
		doc:  "A call with more messages than one statement of an adapter may carry (1,201 here) stores them all; an append that replaces every message keeps their number; CreateThread of a missing user and AppendMessages of an unknown thread store none. (That a failure after part of the messages is written stores none is an adapter's own test: it needs a fault inside the database.)",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			many := func(text string) []store.ThreadMessage {
				msgs := make([]store.ThreadMessage, 1201)
				for i := range msgs {
					msgs[i] = store.ThreadMessage{ID: fmt.Sprint("m", i), Sort: int64(i + 1), Body: json.RawMessage(fmt.Sprintf(`{"n":%d,"text":%q}`, i, text))}
				}
				return msgs
			}
			check := func(chatID string, want []store.ThreadMessage) {
				t.Helper()
				got, err := st.Messages(ctx(t), f.account.ID, chatID)
				mustNil(t, "Messages", err)
				if len(got) != len(want) {
					t.Fatalf("%s: %d messages, want %d", chatID, len(got), len(want))
				}
				for i := range got {
					if got[i].ID != want[i].ID || got[i].Sort != want[i].Sort || !jsonEqual(got[i].Body, want[i].Body) {
						t.Fatalf("%s: message %d = %s %d %s, want %s %d %s", chatID, i, got[i].ID, got[i].Sort, got[i].Body, want[i].ID, want[i].Sort, want[i].Body)
					}
				}
			}
			th := store.Thread{AccountID: f.account.ID, ChatID: "c", AgentID: "7", UserID: u.ID, LastSort: 1201, CreatedAt: t0}
			mustNil(t, "CreateThread", st.CreateThread(ctx(t), th, many("first")...))
			check("c", many("first"))
			mustNil(t, "AppendMessages", st.AppendMessages(ctx(t), f.account.ID, "c", 0, many("second")))
			check("c", many("second"))
			orphan := th
			orphan.ChatID, orphan.UserID = "orphan", u.ID+1000
			wantErr(t, "CreateThread of a missing user", st.CreateThread(ctx(t), orphan, many("x")...), store.ErrNotFound)
			check("orphan", nil)
			wantErr(t, "AppendMessages unknown thread", st.AppendMessages(ctx(t), f.account.ID, "nope", 0, many("x")), store.ErrNotFound)
			check("nope", nil)
		},
	},
}
