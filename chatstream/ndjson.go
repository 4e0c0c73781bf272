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
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/embedkit/embedkit/internal/telemetry"
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
	// detached: detach took the connection over; conn and the fields
	// below belong to the goroutine that follows the turn from then on
	// (cutAt excepted). Set before that goroutine starts, never changed
	// after.
	detached bool
	conn     net.Conn
	pend     [][]byte // lines written and not yet flushed
	pendLen  int
	lines    int64 // lines written and not yet counted by the telemetry
	tel      telemetry.Detached
	gone     context.CancelFunc // ends ctx: the client went away
	broken   bool               // a write to conn failed
	watched  chan struct{}      // closed when watch returns
	// cutAt (Unix nanoseconds, 0 if unset) bounds every write deadline of
	// a detached stream once a shutdown stopped the turns (cut).
	cutAt atomic.Int64
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
// goroutines like for the turns, and bounds their writes once it stops the
// turns. Not detached: HTTP/2 streams; responses written through a
// ResponseWriter other than net/http's own and the library's telemetry
// (a host's wrapper may transform the body, as compression does, which
// writes to the connection would bypass). A detached stream notices a
// client that goes away as net/http does, by a read pending on the
// connection (watch).

// detachable reports whether begin may prepare the stream for detach: an
// HTTP/1.1 response held for a turn, written through net/http's writer
// itself, possibly under the library's telemetry.
func (lw *lineWriter) detachable() bool {
	if !lw.hold || !lw.http11 {
		return false
	}
	w := lw.w
	if d, ok := w.(telemetry.Detacher); ok {
		w = d.Unwrap()
	}
	// net/http's HTTP/1.x writer, which is not exported.
	t := reflect.TypeOf(w)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "net/http" && t.Elem().Name() == "response"
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
	conn, _, err := lw.rc.Hijack()
	if err != nil {
		// The request's body was read whole, and nothing more is
		// expected on the connection (Connection: close): its buffered
		// reader is dropped.
		return false
	}
	if d, ok := lw.w.(telemetry.Detacher); ok {
		lw.tel = d.Detach()
	}
	// Hold nothing of net/http's: the connection's buffers, request and
	// response are released with the handler.
	lw.w, lw.rc = nil, nil
	lw.ctx, lw.gone = detachedContext(lw.ctx)
	lw.conn, lw.detached = conn, true
	lw.armed, lw.noDeadline = false, false // deadlines are set on conn now
	lw.watched = make(chan struct{})
	go lw.watch()
	return true
}

// detachedContext returns the context of a stream detached from a
// request with context ctx, which net/http cancels when the handler
// returns: its values and deadline (a host's timeout middleware still ends
// the stream) without its cancellation; gone ends it when the client went
// away, as net/http ends a request's.
func detachedContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		var stop context.CancelFunc
		d, stop = context.WithDeadline(d, dl)
		return d, func() { stop(); cancel() }
	}
	return d, cancel
}

// watch waits on a read of the detached connection, as net/http's
// background read does for a request: when it fails, the client went away
// (or close closed the connection), and it ends lw.ctx so that a stream
// waiting for the turn's next line ends at once. A byte read instead (the
// client sent more, despite Connection: close) ends the watch, as it ends
// net/http's: the stream goes on until it ends or a write fails.
func (lw *lineWriter) watch() {
	defer close(lw.watched)
	if _, err := lw.conn.Read(make([]byte, 1)); err != nil {
		lw.gone()
	}
}

// cut bounds the write deadlines of a detached stream by at, from now on
// and for a write in progress. Safe for use by any goroutine.
func (lw *lineWriter) cut(at time.Time) {
	lw.cutAt.Store(at.UnixNano())
	_ = lw.conn.SetWriteDeadline(at)
}

// chunkBuffers hold a detached stream's chunk while it is written, so
// that an idle stream holds no buffer.
var chunkBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

var crlf = []byte("\r\n")

// flushConn writes the pending lines to the detached connection as one
// chunk of the response's body, in one write unless it is longer than
// writeChunk.
func (lw *lineWriter) flushConn() bool {
	if lw.pendLen == 0 {
		return true
	}
	bp := chunkBuffers.Get().(*[]byte)
	b := strconv.AppendInt((*bp)[:0], int64(lw.pendLen), 16)
	b = append(b, crlf...)
	for _, l := range lw.pend {
		b = append(b, l...)
	}
	b = append(b, crlf...)
	err := lw.writeConn(b)
	if cap(b) <= 2*writeChunk { // a chunk of long lines is not kept
		*bp = b[:0]
		chunkBuffers.Put(bp)
	}
	clear(lw.pend)
	lw.pend, lw.pendLen = lw.pend[:0], 0
	if lw.lines >= telemetryLineBatch && lw.tel.Lines != nil {
		lw.tel.Lines(lw.lines)
		lw.lines = 0
	}
	if err != nil {
		// As net/http does for a request whose write fails: the client
		// is taken to be gone.
		lw.err, lw.broken = err, true
		lw.gone()
		return false
	}
	return true
}

// telemetryLineBatch is how many lines of a detached stream are counted
// at once.
const telemetryLineBatch = 64

// writeConn writes b to the detached connection, each writeChunk bytes
// under a write deadline of their own.
func (lw *lineWriter) writeConn(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		lw.arm()
		if _, err := lw.conn.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// close ends a detached stream: its last lines, the request's telemetry
// ended, the body's last chunk, the connection closed.
func (lw *lineWriter) close() {
	ok := !lw.broken && lw.flushConn()
	// The request ends for telemetry before the body does, as a request
	// that net/http serves ends when its handler returns, before net/http
	// writes the last chunk: a client that read the whole body finds its
	// request counted.
	if lw.tel.End != nil {
		lw.tel.End(lw.lines)
	}
	// Unless a write failed, the body ends properly, as net/http ends it,
	// also when the stream's context ended it (a host's deadline).
	if ok {
		_ = lw.writeConn([]byte("0\r\n\r\n"))
	}
	lw.conn.Close()
	<-lw.watched
	lw.gone()
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
	if lw.detached {
		lw.armConn(now)
		return
	}
	if lw.armed && now.Sub(lw.armedAt) < lw.timeout/8 {
		return
	}
	lw.armedAt = now
	if err := lw.rc.SetWriteDeadline(now.Add(lw.timeout)); err != nil {
		lw.noDeadline = true
		if errors.Is(err, http.ErrNotSupported) {
			lw.warn()
		}
		return
	}
	lw.armed = true
}

// armConn is arm for a detached stream. Once a shutdown cut the stream,
// every write gets the earlier of its own deadline and the cut's; reading
// the cut after setting a deadline makes a cut that comes meanwhile win.
func (lw *lineWriter) armConn(now time.Time) {
	if lw.cutAt.Load() == 0 && lw.armed && now.Sub(lw.armedAt) < lw.timeout/8 {
		return
	}
	d := now.Add(lw.timeout)
	lw.armedAt = now
	lw.armed = lw.conn.SetWriteDeadline(d) == nil
	if at := lw.cutAt.Load(); at != 0 && at < d.UnixNano() {
		_ = lw.conn.SetWriteDeadline(time.Unix(0, at))
	}
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
