package chatstream

import (
	"context"
	"encoding/json"
)

// Agent answers one turn of a chat. A host application implements it; the
// library turns what the agent emits into the wire messages of the spec (ids,
// sort, graphPath, isDelta, isInProcess, __cutoff__, __state__), so no agent
// can produce a stream that breaks it.
type Agent interface {
	// Answer runs one turn. It emits thinking, content pieces and tool calls
	// through e, in the order they should appear, and returns when the
	// answer is complete. ctx ends when the turn is aborted, reaches its
	// deadline or the server shuts down: Answer must then return promptly.
	// A non-nil error ends the turn with a final message saying the answer
	// could not be produced; the error itself is logged, never sent.
	// Answer is called from its own goroutine, one turn at a time per thread
	// but concurrently across threads.
	Answer(ctx context.Context, t Turn, e Emitter) error
}

// AgentFunc adapts a function to [Agent].
type AgentFunc func(ctx context.Context, t Turn, e Emitter) error

// Answer calls f.
func (f AgentFunc) Answer(ctx context.Context, t Turn, e Emitter) error { return f(ctx, t, e) }

// Turn is what an agent knows about the turn it answers.
type Turn struct {
	AccountName string
	AgentID     string
	ChatID      string
	// Input is the user's message.
	Input string
	// History is the thread's earlier messages in their final form, oldest
	// first (the user message of this turn is not included).
	History []Message
	// User is who asks.
	User User
	// ActiveBranchName is the development branch to query ("" for the main
	// branch). IsDefaultBranch follows the spec's defaults: true when no
	// branch is named, false when one is, unless the request says otherwise.
	ActiveBranchName string
	IsDefaultBranch  bool
	// Branches are the account's known branches.
	Branches []string
	// DeploymentID is the agent's deployment.
	DeploymentID int64
}

// User is the identity of the asking user, with what drives row-level
// security and personalization.
type User struct {
	ExternalID string // set for external users
	InternalID string // set for internal users
	Email      string
	// DisplayName is the name the embedding application gave the user
	// (userProfile.displayName), "" when none: a prompt may greet them.
	DisplayName string
	// Attributes maps attribute names to their values: string, float64,
	// []string or []float64.
	Attributes map[string]any
	// Groups are the user's group names.
	Groups []string
	// SecurityContext is the JSON object supplied for the user, or nil.
	SecurityContext json.RawMessage
}

// Emitter is how an agent emits the pieces of its answer. Its methods are
// not safe for concurrent use: an agent emits from one goroutine. Each
// method returns an error once the turn is over (aborted, timed out, shut
// down); the agent should then return.
type Emitter interface {
	// Thinking emits reasoning text. It is streamed only in development
	// mode; otherwise it is dropped.
	Thinking(text string) error
	// Content emits the next piece of the answer's text.
	Content(piece string) error
	// ToolCall emits the start of a tool call. input is encoded as JSON into
	// the wire's toolCall.input string. The returned ToolCall must be ended
	// with exactly one of Result or Fail before the next ToolCall or Content.
	ToolCall(name string, input any) (ToolCall, error)
}

// ToolCall is a tool call in progress.
type ToolCall interface {
	// Result completes the call; v is encoded as JSON into toolCall.result.
	Result(v any) error
	// Fail completes the call with {"error": msg} as its result.
	Fail(msg string) error
}
