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
	ChatID      string    `json:"chatId,omitempty"`
	IsStreaming bool      `json:"isStreaming"`
	Messages    []Message `json:"messages,omitempty"`
	Aborted     bool      `json:"aborted,omitempty"`
	Error       string    `json:"error,omitempty"`
}
