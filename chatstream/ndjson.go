package chatstream

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
)

// ContentType is the media type of the chat stream.
const ContentType = "application/x-ndjson"

// marshalNoEscape encodes v as JSON without HTML escaping (tool inputs hold
// SQL with < and >), without a trailing newline.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encodeLine encodes m as one NDJSON line, newline included. A Message
// always encodes (its fields are plain strings, numbers and booleans).
func encodeLine(m *Message) []byte {
	var b bytes.Buffer
	b.Grow(128 + len(m.Content))
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		// Unreachable for Message; keep the stream valid regardless.
		return []byte(`{"id":"__error__","role":"assistant","content":"","isDelta":false,"isInProcess":false,"sort":0}` + "\n")
	}
	return b.Bytes()
}

// lineWriter writes NDJSON lines to a response and flushes them. Writes stop
// once the request's context ends or a write fails.
type lineWriter struct {
	ctx     context.Context
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	err     error
}

func newLineWriter(ctx context.Context, w http.ResponseWriter) *lineWriter {
	return &lineWriter{ctx: ctx, w: w, rc: http.NewResponseController(w)}
}

// begin writes the status and headers once.
func (lw *lineWriter) begin() {
	if lw.started {
		return
	}
	lw.started = true
	h := lw.w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // ask reverse proxies not to buffer
	lw.w.WriteHeader(http.StatusOK)
}

// write writes one encoded line without flushing. It reports false once
// the stream is dead.
func (lw *lineWriter) write(line []byte) bool {
	if lw.err != nil {
		return false
	}
	lw.begin()
	if _, err := lw.w.Write(line); err != nil {
		lw.err = err
		return false
	}
	return true
}

// flush sends what was written to the client.
func (lw *lineWriter) flush() bool {
	if lw.err != nil {
		return false
	}
	if err := lw.ctx.Err(); err != nil {
		lw.err = err
		return false
	}
	if err := lw.rc.Flush(); err != nil {
		lw.err = err
		return false
	}
	return true
}

// send writes and flushes one message.
func (lw *lineWriter) send(m Message) bool {
	return lw.write(encodeLine(&m)) && lw.flush()
}
