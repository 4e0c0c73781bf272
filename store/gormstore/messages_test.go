package gormstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

func manyMessages(n int, text string) []store.ThreadMessage {
	out := make([]store.ThreadMessage, n)
	for i := range out {
		out[i] = store.ThreadMessage{ID: fmt.Sprint("m", i), Sort: int64(i + 1), Body: json.RawMessage(fmt.Sprintf(`{"n":%d,"t":%q}`, i, text))}
	}
	return out
}

// TestMessagesAllOrNothing: a call whose messages take several statements
// (500 messages each) and fails in a later one stores none of them, nor
// CreateThread's thread; the messages are stored as text, and the host's
// Create callbacks see their upsert with its table.
func TestMessagesAllOrNothing(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			db := testdb.OpenGormDSN(t, testdb.OpenDSN(t, backend), nil)
			var (
				mu     sync.Mutex
				tables = map[string]int{}
			)
			if err := db.Callback().Create().After("*").Register("test:messages", func(d *gorm.DB) {
				if strings.Contains(d.Statement.SQL.String(), "embedkit_thread_messages") {
					mu.Lock()
					tables[d.Statement.Table]++
					mu.Unlock()
				}
			}); err != nil {
				t.Fatal(err)
			}
			st := openOn(t, db)
			ctx := t.Context()
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true})
			if err != nil {
				t.Fatal(err)
			}
			// A message with id "bad" fails its statement.
			fault := `ALTER TABLE embedkit_thread_messages ADD CONSTRAINT test_bad CHECK (id <> 'bad')`
			if backend == testdb.SQLite {
				fault = `CREATE TRIGGER test_bad BEFORE INSERT ON embedkit_thread_messages WHEN NEW.id = 'bad' BEGIN SELECT RAISE(ABORT, 'bad'); END`
			}
			if err := db.Exec(fault).Error; err != nil {
				t.Fatal(err)
			}
			for i, lastSort := range []int64{0, 5000} { // without and with the thread's row written
				chatID := fmt.Sprint("c", i)
				if err := st.CreateThread(ctx, store.Thread{AccountID: a.ID, ChatID: chatID, AgentID: "7", UserID: u.ID}); err != nil {
					t.Fatal(err)
				}
				msgs := manyMessages(1201, "x")
				msgs[700].ID = "bad" // the second statement
				if err := st.AppendMessages(ctx, a.ID, chatID, lastSort, msgs); err == nil {
					t.Fatalf("AppendMessages (lastSort %d) with a bad message: no error", lastSort)
				}
				if got, err := st.Messages(ctx, a.ID, chatID); err != nil || len(got) != 0 {
					t.Errorf("AppendMessages (lastSort %d) failed in its second statement: %d messages stored, %v", lastSort, len(got), err)
				}
				if th, err := st.Thread(ctx, a.ID, chatID); err != nil || th.LastSort != 0 {
					t.Errorf("AppendMessages (lastSort %d) failed: thread %+v, %v", lastSort, th, err)
				}
			}
			msgs := manyMessages(1201, "x")
			msgs[1100].ID = "bad" // the third statement
			if err := st.CreateThread(ctx, store.Thread{AccountID: a.ID, ChatID: "ct", AgentID: "7", UserID: u.ID}, msgs...); err == nil {
				t.Fatal("CreateThread with a bad message: no error")
			}
			if _, err := st.Thread(ctx, a.ID, "ct"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("CreateThread failed in its third statement: Thread = %v, want ErrNotFound", err)
			}
			if got, _ := st.Messages(ctx, a.ID, "ct"); len(got) != 0 {
				t.Errorf("CreateThread failed: %d messages stored", len(got))
			}
			if err := st.CreateThread(ctx, store.Thread{AccountID: a.ID, ChatID: "ok", AgentID: "7", UserID: u.ID}, manyMessages(1201, "x")...); err != nil {
				t.Fatal(err)
			}
			typeOf := `SELECT DISTINCT typeof(body) FROM embedkit_thread_messages`
			if backend != testdb.SQLite {
				typeOf = `SELECT DISTINCT pg_typeof(body)::text FROM embedkit_thread_messages`
			}
			var types []string
			if err := db.Raw(typeOf).Scan(&types).Error; err != nil || len(types) != 1 || types[0] != "text" {
				t.Errorf("the bodies' types: %v, %v; want text", types, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(tables) != 1 || tables["embedkit_thread_messages"] == 0 {
				t.Errorf("the host's Create callback saw the upserts with tables %v, want embedkit_thread_messages", tables)
			}
		})
	}
}
