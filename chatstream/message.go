package chatstream

// Reserved message ids.
const (
	CutoffID = "__cutoff__"
	StateID  = "__state__"
)

// Roles of a message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one line of the stream (the spec's stream message). The handler
// writes it and the [Client] reads it.
type Message struct {
	ID       string    `json:"id"`
	Role     string    `json:"role"`
	Content  string    `json:"content"`
	Thinking *string   `json:"thinking,omitempty"`
	ToolCall *ToolInfo `json:"toolCall,omitempty"`
	// GraphPath is the agent-graph node that produced the message.
	GraphPath            []string `json:"graphPath,omitempty"`
	IsDelta              bool     `json:"isDelta"`
	IsInProcess          bool     `json:"isInProcess"`
	IsStructuredResponse *bool    `json:"isStructuredResponse,omitempty"`
	Sort                 int64    `json:"sort"`
	State                *State   `json:"state,omitempty"`
}

// ToolInfo is the toolCall field of a message. Input and Result hold JSON
// encoded as strings, as on the wire.
type ToolInfo struct {
	Name   string  `json:"name"`
	Input  string  `json:"input"`
	Result *string `json:"result,omitempty"`
}

// State is the state field of the __cutoff__ and __state__ messages.
type State struct {
	// ChatID is the thread's id, to send as chatId in later requests.
	ChatID string `json:"chatId,omitempty"`
	// IsStreaming is true on the __cutoff__ message of a stream that
	// rejoins a running turn.
	IsStreaming bool `json:"isStreaming"`
	// Messages is the thread's history in final form (__state__ only),
	// ordered by sort.
	Messages []Message `json:"messages,omitzero"`
	// Aborted is true when the turn was aborted (or stopped by a shutdown).
	Aborted bool `json:"aborted,omitempty"`
	// Error is set when the turn ended in an error: a message for the
	// caller, without internals.
	Error string `json:"error,omitempty"`
}
