package chatstream

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ContentType is the media type of the chat stream.
const ContentType = "application/x-ndjson"

// jsonEncoder is a reusable JSON encoder without HTML escaping (tool inputs
// hold SQL with < and >) writing to its own buffer.
type jsonEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// jsonEncoders holds jsonEncoders between uses: encoding a line then costs
// one allocation of its exact size, not a new encoder and a buffer grown
// twice.
var jsonEncoders = sync.Pool{New: func() any {
	e := new(jsonEncoder)
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// maxPooledBuffer is the largest buffer kept for reuse.
const maxPooledBuffer = 64 << 10

// encodeJSON encodes v with a trailing newline into a new slice of its
// exact size.
func encodeJSON(v any) ([]byte, error) {
	e := jsonEncoders.Get().(*jsonEncoder)
	e.buf.Reset()
	err := e.enc.Encode(v)
	var out []byte
	if err == nil {
		out = bytes.Clone(e.buf.Bytes())
	}
	if e.buf.Cap() <= maxPooledBuffer {
		jsonEncoders.Put(e)
	}
	return out, err
}

// marshalNoEscape encodes v as JSON without HTML escaping (tool inputs hold
// SQL with < and >), without a trailing newline.
func marshalNoEscape(v any) ([]byte, error) {
	b, err := encodeJSON(v)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil
}

// encodeLine encodes m as one NDJSON line, newline included. A Message
// always encodes (its fields are plain strings, numbers and booleans).
func encodeLine(m *Message) []byte {
	b, err := encodeJSON(m)
	if err != nil {
		// Unreachable for Message; keep the stream valid regardless.
		return []byte(`{"id":"__error__","role":"assistant","content":"","isDelta":false,"isInProcess":false,"sort":0}` + "\n")
	}
	return b
}

// lineWriter writes NDJSON lines to a response and flushes them. Writes stop
// once the request's context ends or a write fails. Each line, and each
// writeChunk of a long line, must reach the connection within timeout (a
// client that reads nothing fails the write). Over HTTP/2 the deadline is
// cleared while the stream waits for more lines (a deadline that passes
// resets an HTTP/2 stream even while nothing is written); over HTTP/1.x it
// stays, since it only bounds writes and arm renews it before the next
// write.
// A writer that cannot flush still gets every line, delivered when the
// response ends.
type lineWriter struct {
	ctx     context.Context
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	h       *Handler // for its logger and its once-only warning
	started bool
	// noFlush: the writer has no Flush (nor Unwrap to one); lines go out
	// when the response ends.
	noFlush bool
	// noDeadline: the writer takes no write deadline.
	noDeadline bool
	// armed: a write deadline is set, at armedAt.
	armed   bool
	armedAt time.Time
	// keepArmed: the deadline may stay set while the stream waits
	// (HTTP/1.x).
	keepArmed bool
	// contentType is the response's media type; "" is [ContentType].
	contentType string
	err         error

	// http11: the request is HTTP/1.1 (or a later 1.x).
	http11 bool
	// hold: the response will follow a running turn (set before the
	// first line); begin then prepares detach.
	hold bool
	// closing: the response was begun with Connection: close, so that
	// detach may take its connection over.
	closing bool
	// detached: detach took the connection over; conn, pend and the rest
	// below belong to the goroutine that follows the turn from then on.
	// Set before that goroutine starts, never changed after.
	detached bool
	conn     net.Conn
	pend     net.Buffers // lines written and not yet flushed, after a slot for the chunk's size
	pendLen  int
	lines    int64             // lines written since detach
	endTel   func(lines int64) // ends the request's telemetry (nil without it)
}

// newLineWriter returns a lineWriter for the response to r of h. The caller
// defers its end.
func (h *Handler) newLineWriter(r *http.Request, w http.ResponseWriter) *lineWriter {
	return &lineWriter{ctx: r.Context(), w: w, rc: http.NewResponseController(w), timeout: h.cfg.streamWriteTimeout, h: h,
		keepArmed: r.ProtoMajor == 1, http11: r.ProtoMajor == 1 && r.ProtoMinor >= 1}
}

// Detaching a stream. A stream that follows a running turn holds, for the
// turn's life, the request's goroutine, net/http's goroutine that watches
// the connection and the connection's buffers and request: most of what an
// open stream costs. Over HTTP/1.1 the handler takes the connection over
// (http.ResponseController.Hijack) once the stream's first lines are sent,
// returns, and a goroutine of the registry follows the turn, writing the
// rest of the chunked body straight to the connection and closing it at the
// end (the response said Connection: close). Shutdown waits for these
// goroutines like for the turns. Not detached: HTTP/2 streams, writers that
// cannot hijack, and handlers with WithCancelOnDisconnect (a client that
// goes away is noticed at the next write once detached, not at once).

// detachable reports whether begin may prepare the stream for detach.
func (lw *lineWriter) detachable() bool {
	if !lw.hold || !lw.http11 || lw.h.cfg.cancelOnDisconnect {
		return false
	}
	w := lw.w
	for {
		if _, ok := w.(http.Hijacker); ok {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

// detacher is the request telemetry's writer (internal/telemetry): the
// request ends when the detached stream does.
type detacher interface {
	Detach() (end func(lines int64))
}

// detach flushes what was written and takes the connection over, so that
// the request's handler can return while the stream goes on (see
// "Detaching a stream"). It reports whether it did; when not, the stream
// goes on through the ResponseWriter. After it, only the goroutine that
// follows the turn uses lw, and ends it with close.
func (lw *lineWriter) detach() bool {
	if !lw.closing || !lw.flush() {
		return false
	}
	conn, brw, err := lw.rc.Hijack()
	if err != nil {
		return false
	}
	_ = brw // the request's body was read; nothing else is expected (Connection: close)
	for w := lw.w; w != nil; {
		if d, ok := w.(detacher); ok {
			lw.endTel = d.Detach()
			break
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	// Hold nothing of net/http's: the connection's buffers, request and
	// response are released with the handler.
	lw.w, lw.rc = nil, nil
	lw.ctx = context.WithoutCancel(lw.ctx)
	lw.conn, lw.detached, lw.armed = conn, true, false
	return true
}

// writeConn writes b to the detached connection, each writeChunk bytes
// under a write deadline of their own.
func (lw *lineWriter) writeConn(b net.Buffers) error {
	for len(b) > 0 {
		var part net.Buffers
		n, k := 0, 0
		for k < len(b) && n+len(b[k]) <= writeChunk {
			n += len(b[k])
			k++
		}
		if k == 0 { // a buffer longer than writeChunk: its first part
			part = net.Buffers{b[0][:writeChunk]}
			b[0] = b[0][writeChunk:]
		} else {
			part, b = b[:k], b[k:]
		}
		lw.arm()
		if _, err := part.WriteTo(lw.conn); err != nil {
			return err
		}
	}
	return nil
}

var crlf = []byte("\r\n")

// flushConn writes the pending lines to the detached connection as one
// chunk of the response's body.
func (lw *lineWriter) flushConn() bool {
	if lw.pendLen == 0 {
		return true
	}
	var size [20]byte
	lw.pend[0] = append(strconv.AppendInt(size[:0], int64(lw.pendLen), 16), crlf...)
	lw.pend = append(lw.pend, crlf)
	err := lw.writeConn(lw.pend)
	clear(lw.pend)
	lw.pend, lw.pendLen = lw.pend[:0], 0
	if err != nil {
		lw.err = err
		return false
	}
	return true
}

// close ends a detached stream: the body's last chunk, the connection
// closed, the request's telemetry ended.
func (lw *lineWriter) close() {
	if lw.err == nil && lw.flushConn() {
		lw.arm()
		if _, err := lw.conn.Write([]byte("0\r\n\r\n")); err != nil {
			lw.err = err
		}
	}
	lw.conn.Close()
	if lw.endTel != nil {
		lw.endTel(lw.lines)
	}
}

// warn logs, once per handler, that the stream's writer cannot flush or
// take a deadline, naming what it lacks.
func (lw *lineWriter) warn() {
	lw.h.cfg.flushWarning.Do(func() {
		log := lw.h.cfg.log
		if log == nil {
			log = slog.Default()
		}
		// The culprit is the innermost writer reached through Unwrap
		// (route wrappers such as the telemetry one unwrap properly).
		w := lw.w
		for {
			u, ok := w.(interface{ Unwrap() http.ResponseWriter })
			if !ok {
				break
			}
			w = u.Unwrap()
		}
		msg := "lacks an Unwrap method: no write deadline can be set, so a client that stops reading is not disconnected"
		if _, flush := w.(http.Flusher); !flush {
			msg = "lacks Flush and Unwrap methods: lines reach the client only when the response ends (or the writer flushes on its own), and a client that stops reading is not disconnected"
		}
		typ := fmt.Sprintf("%T", w)
		fix := "; give the wrapping ResponseWriter an Unwrap() http.ResponseWriter method (see http.ResponseController)"
		if typ == "*http.timeoutWriter" {
			// The standard library's: it holds the whole response, and
			// answers 503 when its time is up while the turn goes on.
			fix = "; http.TimeoutHandler holds the whole response until the handler returns: mount the chat routes outside it"
		}
		log.LogAttrs(lw.ctx, slog.LevelWarn, "chatstream: the stream's ResponseWriter "+msg+fix,
			slog.String("writer", typ))
	})
}

// begin writes the status and headers once.
func (lw *lineWriter) begin() {
	if lw.started {
		return
	}
	lw.started = true
	h := lw.w.Header()
	h.Set("Content-Type", cmp.Or(lw.contentType, ContentType))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // ask reverse proxies not to buffer
	if lw.detachable() {
		h.Set("Connection", "close")
		lw.closing = true
	}
	lw.w.WriteHeader(http.StatusOK)
}

// arm sets the write deadline of the next line. A deadline set less than
// an eighth of the timeout ago is kept (lines come in bursts; setting a
// deadline costs a lock and a timer update), so a line gets between 7/8 of
// the timeout and all of it.
func (lw *lineWriter) arm() {
	if lw.noDeadline {
		return
	}
	now := time.Now()
	if lw.armed && now.Sub(lw.armedAt) < lw.timeout/8 {
		return
	}
	lw.armedAt = now
	if lw.detached {
		lw.armed = lw.conn.SetWriteDeadline(now.Add(lw.timeout)) == nil
		return
	}
	if err := lw.rc.SetWriteDeadline(now.Add(lw.timeout)); err != nil {
		lw.noDeadline = true
		if errors.Is(err, http.ErrNotSupported) {
			lw.warn()
		}
		return
	}
	lw.armed = true
}

// disarm clears the write deadline while the stream waits for lines (an
// HTTP/2 stream whose deadline passes is reset even when nothing is being
// written). Over HTTP/1.x it keeps it: a deadline that passes while
// nothing is written has no effect, and arm sets a new one before the next
// write (one deadline update per timeout/8 instead of two per line).
func (lw *lineWriter) disarm() {
	if lw.armed && !lw.keepArmed {
		lw.armed = false
		_ = lw.rc.SetWriteDeadline(time.Time{})
	}
}

// writeChunk is how much of a line one write deadline covers: a client
// must take a piece this large within the timeout, so that a long line (a
// __state__ with a long history) to a slow but reading client is not cut.
const writeChunk = 64 << 10

// write writes one encoded line without flushing. It reports false once
// the stream is dead.
func (lw *lineWriter) write(line []byte) bool {
	if lw.err != nil {
		return false
	}
	if lw.detached {
		if len(lw.pend) == 0 {
			lw.pend = append(lw.pend, nil) // the chunk's size, at flush
		}
		lw.pend = append(lw.pend, line)
		lw.pendLen += len(line)
		lw.lines++
		return true
	}
	lw.begin()
	for len(line) > 0 {
		n := min(len(line), writeChunk)
		lw.arm()
		if _, err := lw.w.Write(line[:n]); err != nil {
			lw.err = err
			return false
		}
		line = line[n:]
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
	if lw.detached {
		return lw.flushConn()
	}
	if !lw.noFlush {
		if err := lw.rc.Flush(); errors.Is(err, http.ErrNotSupported) {
			// Keep writing: the lines go out when the response ends.
			lw.noFlush = true
			lw.warn()
		} else if err != nil {
			lw.err = err
			return false
		}
	}
	lw.disarm()
	return true
}

// send writes and flushes one message.
func (lw *lineWriter) send(m Message) bool {
	return lw.write(encodeLine(&m)) && lw.flush()
}

// end bounds what the server still writes after the handler returns (the
// end of a chunked body, or every line when the writer could not flush) by
// one more write deadline.
func (lw *lineWriter) end() {
	if lw.detached {
		return // the goroutine following the turn ends it (close)
	}
	if lw.started && lw.err == nil {
		lw.arm()
	}
}
