package chatstream

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"
)

// emitter is the [Emitter] of a turn.
type emitter struct{ t *turn }

// lineOverhead bounds what a line adds to the text it carries: its id,
// role, flags, sort and field names.
const lineOverhead = 512

// encodedLen is the length of s as a JSON string's contents: what its
// escapes add (a control character takes six bytes, an invalid byte the
// six of \ufffd) counts, so that a check before encoding holds.
func encodedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20:
			n += 6
		case c < utf8.RuneSelf:
			n++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
				n += 6
			default:
				n += size
			}
			i += size
			continue
		}
		i++
	}
	return n
}

// checkLocked returns the error of an emitter call that must not proceed:
// the turn is over, or a line carrying texts would take its stream past
// its cap.
func (e *emitter) checkLocked(texts ...string) error {
	if e.t.finishing {
		return e.over()
	}
	n := lineOverhead
	for _, s := range texts {
		n += encodedLen(s)
	}
	if e.t.size+n > e.t.maxSize {
		e.t.tooLong = true
		return ErrTurnTooLong
	}
	return nil
}

// reserveLocked asks for a checkpoint ahead of the clock when few
// reserved sorts are left; it never waits (lines past the mark wait in the
// log instead).
func (e *emitter) reserveLocked() {
	if t := e.t; t.seq.next >= t.reserved-sortLow {
		t.requestCheckpoint()
	}
}

func (e *emitter) over() error {
	if c := context.Cause(e.t.ctx); c != nil {
		return fmt.Errorf("%w: %w", ErrTurnOver, c)
	}
	return ErrTurnOver
}

// Thinking implements [Emitter].
func (e *emitter) Thinking(text string) error {
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := e.checkLocked(text); err != nil {
		return err
	}
	e.reserveLocked()
	m, ok, err := t.seq.think(text)
	if err != nil || !ok {
		return err
	}
	t.emitLocked(m)
	return nil
}

// Content implements [Emitter].
func (e *emitter) Content(piece string) error {
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := e.checkLocked(piece); err != nil {
		return err
	}
	if piece == "" {
		return nil
	}
	e.reserveLocked()
	m, err := t.seq.piece(piece)
	if err != nil {
		return err
	}
	t.emitLocked(m)
	return nil
}

// ToolCall implements [Emitter].
func (e *emitter) ToolCall(name string, input any) (ToolCall, error) {
	if name == "" {
		return nil, errors.New("chatstream: tool call without a name")
	}
	in, err := marshalNoEscape(input)
	if err != nil {
		return nil, fmt.Errorf("chatstream: encode tool input: %w", err)
	}
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := e.checkLocked(name, string(in)); err != nil {
		return nil, err
	}
	e.reserveLocked()
	id := newID()
	m, err := t.seq.toolStart(id, name, string(in))
	if err != nil {
		return nil, err
	}
	t.emitLocked(m)
	return &toolCall{e: e, id: id, name: name, input: string(in)}, nil
}

// toolCall is the [ToolCall] of an emitter.
type toolCall struct {
	e           *emitter
	id          string
	name, input string // repeated in the result's line
}

// Result implements [ToolCall].
func (c *toolCall) Result(v any) error {
	b, err := marshalNoEscape(v)
	if err != nil {
		return fmt.Errorf("chatstream: encode tool result: %w", err)
	}
	return c.end(string(b))
}

// Fail implements [ToolCall].
func (c *toolCall) Fail(msg string) error { return c.end(errorResult(msg)) }

func (c *toolCall) end(result string) error {
	t := c.e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := c.e.checkLocked(c.name, c.input, result); err != nil {
		return err
	}
	c.e.reserveLocked()
	m, err := t.seq.toolEnd(c.id, result)
	if err != nil {
		return err
	}
	t.emitLocked(m)
	return nil
}
