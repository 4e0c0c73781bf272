package chatstream

import (
	"cmp"
	"slices"
)

// Conversation rebuilds messages from the lines of one or more streams of a
// thread: lines are merged by id (a delta appends its content and thinking,
// any other line replaces the message), and the history is ordered by sort.
// The zero value is ready to use. A Conversation is not safe for concurrent
// use.
type Conversation struct {
	byID   map[string]int
	msgs   []Message
	chatID string
	state  *State
	final  *Message
}

// Add merges one streamed line.
func (c *Conversation) Add(m Message) {
	switch m.ID {
	case CutoffID:
		if m.State != nil && m.State.ChatID != "" {
			c.chatID = m.State.ChatID
		}
		return
	case StateID:
		if m.State != nil {
			st := *m.State
			c.state = &st
			if st.ChatID != "" {
				c.chatID = st.ChatID
			}
		}
		return
	}
	if c.byID == nil {
		c.byID = make(map[string]int)
	}
	i, ok := c.byID[m.ID]
	if !ok {
		c.byID[m.ID] = len(c.msgs)
		m.Thinking = clonePtr(m.Thinking)
		c.msgs = append(c.msgs, m)
	} else if m.IsDelta {
		cur := &c.msgs[i]
		cur.Content += m.Content
		if m.Thinking != nil {
			t := ""
			if cur.Thinking != nil {
				t = *cur.Thinking
			}
			t += *m.Thinking
			cur.Thinking = &t
		}
		cur.IsInProcess = m.IsInProcess
		cur.Sort = m.Sort
		if m.ToolCall != nil {
			cur.ToolCall = m.ToolCall
		}
		if m.GraphPath != nil {
			cur.GraphPath = m.GraphPath
		}
	} else {
		c.msgs[i] = m
	}
	if IsFinalAnswer(m) {
		f := c.msgs[c.byID[m.ID]]
		c.final = &f
	}
}

func clonePtr(p *string) *string {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// IsFinalAnswer reports whether m qualifies as the final answer under the
// spec's rule: role assistant, graphPath whose first element is "final",
// and at most two elements.
func IsFinalAnswer(m Message) bool {
	return m.Role == RoleAssistant && len(m.GraphPath) > 0 && len(m.GraphPath) <= 2 && m.GraphPath[0] == "final"
}

// History returns the merged messages ordered by sort.
func (c *Conversation) History() []Message {
	out := slices.Clone(c.msgs)
	slices.SortStableFunc(out, func(a, b Message) int { return cmp.Compare(a.Sort, b.Sort) })
	return out
}

// FinalAnswer returns the last message added that qualifies as the final
// answer ([IsFinalAnswer]); its Content is the text to present.
func (c *Conversation) FinalAnswer() (Message, bool) {
	if c.final == nil {
		return Message{}, false
	}
	return *c.final, true
}

// ChatID returns the thread's id, from __cutoff__ or __state__.
func (c *Conversation) ChatID() string { return c.chatID }

// State returns the state of the last __state__ line, or nil before one.
func (c *Conversation) State() *State { return c.state }
