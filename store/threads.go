package store

import (
	"context"
	"encoding/json"
	"time"
)

// Thread is a chat thread, keyed by (AccountID, ChatID). It belongs to one
// agent and one user.
type Thread struct {
	AccountID int64
	ChatID    string
	AgentID   string
	UserID    int64
	// LastSort is the highest sort number used by the thread so far; the
	// next turn continues from it.
	LastSort  int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ThreadMessage is one message of a thread's history in its final form.
type ThreadMessage struct {
	ID   string          // the message id, unique within the thread
	Sort int64           // orders the history
	Body json.RawMessage // the final wire message (chatstream.Message)
}

// Threads reads and writes chat threads and their history.
type Threads interface {
	// CreateThread stores a new thread with its first messages msgs (none
	// is fine; their IDs are distinct), which t.LastSort must already cover; an existing
	// (AccountID, ChatID) is [ErrConflict], a missing user [ErrNotFound].
	// Either stores nothing.
	CreateThread(ctx context.Context, t Thread, msgs ...ThreadMessage) error
	// Thread returns [ErrNotFound] when missing.
	Thread(ctx context.Context, accountID int64, chatID string) (Thread, error)
	// AppendMessages stores msgs, whose IDs are distinct (replacing a
	// stored message with the same ID), and raises the thread's LastSort to lastSort if it is higher. A
	// missing thread is [ErrNotFound] and nothing is stored. The store does
	// not keep msgs (nor their bodies) past the call.
	AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []ThreadMessage) error
	// Messages returns the thread's history ordered by Sort.
	Messages(ctx context.Context, accountID int64, chatID string) ([]ThreadMessage, error)
}
