package chatstream

import (
	"cmp"
	"errors"
	"slices"
	"strings"
)

// Graph paths of the messages the library writes.
var (
	agentPath = []string{"agent"}
	toolsPath = []string{"agent", "tools"}
	finalPath = []string{"final", "agent"}
)

// Errors an [Emitter] returns to an agent that misuses it. The stream stays
// valid: the offending call is ignored.
var (
	// ErrToolCallOpen is returned by Content, Thinking and ToolCall while a
	// tool call is still open (neither Result nor Fail called yet).
	ErrToolCallOpen = errors.New("chatstream: a tool call is still open: call Result or Fail first")
	// ErrToolCallDone is returned by Result and Fail on a tool call that is
	// already complete.
	ErrToolCallDone = errors.New("chatstream: tool call already completed")
	// ErrTurnOver is returned by every Emitter method once the turn has
	// ended (aborted, timed out, shut down or answered). It wraps the cause
	// when there is one.
	ErrTurnOver = errors.New("chatstream: turn is over")
	// ErrTurnTooLong is returned by every Emitter method once the turn's
	// stream exceeds its cap ([WithMaxTurnBytes]). A turn that hits it
	// ends like an agent error.
	ErrTurnTooLong = errors.New("chatstream: the answer is too long")
)

// Messages shown to the caller when a turn does not end normally. They
// carry no internals.
const (
	msgCouldNotAnswer = "Sorry, the answer could not be produced. Please try again."
	errAgentFailed    = "the answer could not be produced"
	errTimedOut       = "the answer took too long and was stopped"
	msgShuttingDown   = "the server is shutting down"
	errStoreFailed    = "the answer could not be saved"
	errChatDeleted    = "the chat was deleted while the answer was produced"
)

// outcome is how a turn ended.
type outcome int

const (
	outcomeDone     outcome = iota // the agent returned nil
	outcomeError                   // the agent returned an error (or panicked)
	outcomeAborted                 // abort endpoint or disconnect policy
	outcomeTimeout                 // the turn's deadline
	outcomeShutdown                // the handler shut down
	outcomeDeleted                 // the thread was deleted while the turn ran (its user deprovisioned or expired)
)

// sequence turns emitter events into wire messages for one turn: it assigns
// ids, sort numbers, graph paths and the delta/in-process flags, so that the
// stream follows docs/decisions.md §5 whatever the agent does. It is not safe for
// concurrent use; the turn guards it.
type sequence struct {
	chatID string
	dev    bool
	next   int64 // sort of the next line

	assistantID string
	content     strings.Builder
	thinking    strings.Builder

	tool *Message // the open tool call's initiated message

	// history is the thread's history in final form, this turn's completed
	// messages included; done are this turn's completed messages (the user
	// echo is stored when the turn starts), and done[:stored] are those a
	// checkpoint has stored already.
	history []Message
	done    []Message
	stored  int
}

func newSequence(chatID string, dev bool, lastSort int64, history []Message) *sequence {
	return &sequence{chatID: chatID, dev: dev, next: lastSort + 1, history: history}
}

func (s *sequence) sort() int64 {
	n := s.next
	s.next++
	return n
}

func ptr[T any](v T) *T { return &v }

// echo returns the user echo of input.
func (s *sequence) echo(id, input string) Message {
	m := Message{ID: id, Role: RoleUser, Content: input, Sort: s.sort()}
	s.history = append(s.history, m)
	return m
}

// start returns the assistant start message.
func (s *sequence) start(id string) Message {
	s.assistantID = id
	m := Message{ID: id, Role: RoleAssistant, GraphPath: agentPath, IsDelta: true,
		IsInProcess: true, IsStructuredResponse: ptr(false), Sort: s.sort()}
	if s.dev {
		m.Thinking = ptr("")
	}
	return m
}

// think records reasoning; ok is false when nothing is streamed (not in
// development mode).
func (s *sequence) think(text string) (m Message, ok bool, err error) {
	if s.tool != nil {
		return Message{}, false, ErrToolCallOpen
	}
	if !s.dev {
		return Message{}, false, nil
	}
	s.thinking.WriteString(text)
	return Message{ID: s.assistantID, Role: RoleAssistant, Thinking: ptr(text), GraphPath: agentPath,
		IsDelta: true, IsInProcess: true, IsStructuredResponse: ptr(false), Sort: s.sort()}, true, nil
}

// piece records a content delta.
func (s *sequence) piece(text string) (Message, error) {
	if s.tool != nil {
		return Message{}, ErrToolCallOpen
	}
	s.content.WriteString(text)
	return Message{ID: s.assistantID, Role: RoleAssistant, Content: text, GraphPath: agentPath,
		IsDelta: true, IsInProcess: true, IsStructuredResponse: ptr(false), Sort: s.sort()}, nil
}

// toolStart opens a tool call.
func (s *sequence) toolStart(id, name, input string) (Message, error) {
	if s.tool != nil {
		return Message{}, ErrToolCallOpen
	}
	m := Message{ID: id, Role: RoleAssistant, ToolCall: &ToolInfo{Name: name, Input: input},
		GraphPath: toolsPath, IsInProcess: true, IsStructuredResponse: ptr(false), Sort: s.sort()}
	s.tool = &m
	return m, nil
}

// toolEnd completes the open tool call with id.
func (s *sequence) toolEnd(id, result string) (Message, error) {
	if s.tool == nil || s.tool.ID != id {
		return Message{}, ErrToolCallDone
	}
	m := *s.tool
	s.tool = nil
	m.ToolCall = &ToolInfo{Name: m.ToolCall.Name, Input: m.ToolCall.Input, Result: ptr(result)}
	m.IsInProcess = false
	m.Sort = s.sort()
	s.history = append(s.history, m)
	s.done = append(s.done, m)
	return m, nil
}

// checkpoint returns what a crash must not lose of the running turn and
// no earlier checkpoint stored: its completed messages not stored yet and
// its answer so far in final form (not in process), with sort at (the
// reserved high-water mark, above every line streamed). An open tool call
// is left out. Once they are stored, the caller reports it with
// markStored(done), done being the count returned.
func (s *sequence) checkpoint(at int64) (msgs []Message, done int) {
	partial := Message{ID: s.assistantID, Role: RoleAssistant, Content: s.content.String(), GraphPath: finalPath,
		IsStructuredResponse: ptr(false), Sort: at}
	if s.dev {
		partial.Thinking = ptr(s.thinking.String())
	}
	out := make([]Message, 0, len(s.done)-s.stored+1)
	return append(append(out, s.done[s.stored:]...), partial), len(s.done)
}

// markStored records that the first done completed messages are stored: a
// completed message never changes, so later writes leave it out.
func (s *sequence) markStored(done int) { s.stored = max(s.stored, done) }

// finish ends the turn: it completes an open tool call, writes the final
// assistant message and the __state__ message. It returns the lines to
// stream, the messages to store and the thread's new last sort. The
// __state__ line's sort is at least floor (the thread's reserved sorts),
// so that the next turn starts above every sort reserved for this one. The
// messages to store leave out the completed ones a checkpoint stored.
func (s *sequence) finish(o outcome, floor int64) (lines []Message, store []Message, lastSort int64) {
	if s.tool != nil {
		msg := "the tool call was not completed"
		if o == outcomeAborted || o == outcomeShutdown {
			msg = "aborted"
		}
		m, _ := s.toolEnd(s.tool.ID, errorResult(msg))
		lines = append(lines, m)
	}
	content := s.content.String()
	if o == outcomeError {
		content = msgCouldNotAnswer
	}
	final := Message{ID: s.assistantID, Role: RoleAssistant, Content: content, GraphPath: finalPath,
		IsStructuredResponse: ptr(false), Sort: s.sort()}
	if s.dev {
		final.Thinking = ptr(s.thinking.String())
	}
	s.history = append(s.history, final)
	s.done = append(s.done, final)
	lines = append(lines, final)

	st := &State{ChatID: s.chatID, Messages: sortedHistory(s.history, s.dev)}
	switch o {
	case outcomeError:
		st.Error = errAgentFailed
	case outcomeAborted:
		st.Aborted = true
	case outcomeTimeout:
		st.Error = errTimedOut
	case outcomeShutdown:
		st.Aborted = true
		st.Error = msgShuttingDown
	case outcomeDeleted:
		st.Error = errChatDeleted
	}
	state := Message{ID: StateID, Role: RoleAssistant, Sort: max(s.sort(), floor), State: st}
	lines = append(lines, state)
	return lines, s.done[s.stored:], state.Sort
}

// sortedHistory orders history by sort; entries are in final form. Outside
// development mode it leaves out the thinking that turns run in development
// mode stored.
func sortedHistory(h []Message, dev bool) []Message {
	out := slices.Clone(h)
	slices.SortStableFunc(out, func(a, b Message) int { return cmp.Compare(a.Sort, b.Sort) })
	if !dev {
		for i := range out {
			out[i].Thinking = nil
		}
	}
	if out == nil {
		out = []Message{}
	}
	return out
}

// cutoffMessage is the first line of every stream.
func cutoffMessage(chatID string, streaming bool) Message {
	return Message{ID: CutoffID, Role: RoleAssistant, Sort: 0,
		State: &State{ChatID: chatID, IsStreaming: streaming}}
}

// emptyStateSort is the sort of the __state__ of a thread with no line
// yet (a new chat's, whose id the stream hands out): above __cutoff__'s 0,
// and below the first line of the thread's first turn.
const emptyStateSort = 1

// stateMessage is the __state__ line of a stream without a turn.
func stateMessage(chatID string, lastSort int64, history []Message, dev bool) Message {
	return Message{ID: StateID, Role: RoleAssistant, Sort: max(lastSort, emptyStateSort),
		State: &State{ChatID: chatID, Messages: sortedHistory(history, dev)}}
}

// errorResult is the toolCall.result of a failed call: {"error": msg}.
func errorResult(msg string) string {
	b, _ := marshalNoEscape(struct {
		Error string `json:"error"`
	}{msg})
	return string(b)
}
