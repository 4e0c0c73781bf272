package chatstream

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/embedkit/embedkit/store"
)

// Following a turn: a request without input streams the thread's state,
// or rejoins its running turn, here or on another replica.

// serveState answers a request without input: the thread's state, or the
// running turn rejoined.
func (h *Handler) serveState(w http.ResponseWriter, r *http.Request, c caller, req chatRequest) {
	ctx := r.Context()
	var err error
	if req.SessionSettings.namesAny() {
		onOwnStack(func() { err = h.checkNames(ctx, c, req.SessionSettings, h.cfg.now()) })
		if err != nil {
			h.fail(w, r, err)
			return
		}
	}
	lw := h.newLineWriter(r, w)
	defer lw.end()
	if req.ChatID == "" {
		// A new chat: its id is handed out; the thread is stored with its
		// first input.
		id := newID()
		lw.write(encodeLine(ptr(cutoffMessage(id, false))))
		lw.send(stateMessage(id, 0, nil, h.cfg.dev))
		return
	}
	var th store.Thread
	// On a goroutine of its own, as for an opening (serveStream): this
	// request may follow a running turn for long.
	onOwnStack(func() { th, err = h.threadOf(ctx, c, req.ChatID, req.SessionSettings) })
	if err != nil {
		h.fail(w, r, err)
		return
	}
	after := int64(0)
	if req.ResumeAfterSort != nil {
		after = *req.ResumeAfterSort
	}
	if t, ok := h.turns.running(turnKey{c.acct.ID, th.ChatID}); ok {
		lw.hold = true
		lw.write(encodeLine(ptr(cutoffMessage(th.ChatID, true))))
		h.followTurn(ctx, lw, t, after, false)
		return
	}
	if cl := h.cfg.cluster; cl != nil {
		jctx, cancel := context.WithTimeout(ctx, clusterTimeout)
		rt, ok, err := cl.Join(jctx, ThreadKey{AccountID: c.acct.ID, ChatID: th.ChatID})
		cancel()
		if err != nil {
			h.fail(w, r, clusterUnavailable(err))
			return
		}
		if ok {
			served, err := h.followRemote(ctx, lw, rt, th, after)
			if err != nil {
				h.fail(w, r, err)
			}
			if served || err != nil {
				return
			}
		}
	}
	msgs, err := h.st.Messages(ctx, c.acct.ID, th.ChatID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	history, last := decodeHistory(msgs)
	lw.write(encodeLine(ptr(cutoffMessage(th.ChatID, false))))
	lw.send(stateMessage(th.ChatID, max(last, th.LastSort), history, h.cfg.dev))
}

// Messages of a __state__ that ends a stream of another replica's turn
// before the turn's own __state__.
const (
	errTurnLost       = "the answer was interrupted"
	errFollowStreamed = "the stream was interrupted: request the chat's state again"
)

// followRemoteRetries bounds the failed reads of a remote turn in a row
// before its stream ends.
const followRemoteRetries = 5

// followRemote writes a turn running on another replica to lw: __cutoff__
// with state.isStreaming, the turn's lines so far and the live ones
// (skipping those whose sort is not above after, but never __state__),
// until the turn's __state__ or the client goes away. When the turn's
// process stopped before ending it, when reads keep failing, or when a
// shutdown stops the streams, the stream ends with a __state__ built from
// the stored history and an error. It reports false, with nothing written,
// when the turn ended before its first line: the caller serves the
// thread's stored state then. When it fails before its first line, it
// returns the error to answer with (503) and writes nothing.
func (h *Handler) followRemote(ctx context.Context, lw *lineWriter, rt RemoteTurn, th store.Thread, after int64) (served bool, err error) {
	fctx, cancel := h.turns.followContext(ctx)
	defer cancel()
	var (
		pos      int
		top      int64 // highest sort read
		failures int
		backoff  = 20 * time.Millisecond
	)
	for {
		lines, done, err := rt.Next(fctx, pos)
		if len(lines) > 0 {
			if pos == 0 && !lw.write(encodeLine(ptr(cutoffMessage(th.ChatID, true)))) {
				return true, nil
			}
			for _, l := range lines {
				top = max(top, l.Sort)
				if (l.Sort > after || l.State) && !lw.write(l.Data) {
					return true, nil
				}
			}
			if !lw.flush() {
				return true, nil
			}
			pos += len(lines)
			failures, backoff = 0, 20*time.Millisecond
		}
		if err == nil {
			if done {
				return pos > 0, nil
			}
			continue
		}
		if ctx.Err() != nil {
			return true, nil // the client went away
		}
		var (
			msg    string
			status error // the answer when nothing was written yet
		)
		switch {
		case errors.Is(err, ErrTurnLost):
			msg = errTurnLost
		case fctx.Err() != nil:
			msg, status = msgShuttingDown, errShuttingDown
		default:
			if failures++; failures < followRemoteRetries && sleepCtx(fctx, backoff) {
				backoff *= 2
				continue
			}
			msg, status = errFollowStreamed, clusterUnavailable(err)
		}
		if pos == 0 {
			return false, status
		}
		if status != nil && fctx.Err() == nil && h.cfg.log != nil {
			h.cfg.log.LogAttrs(ctx, slog.LevelWarn, "chat stream of another replica's turn failed",
				slog.String("chatId", th.ChatID), slog.String("error", err.Error()))
		}
		h.endFollow(ctx, lw, th, top, msg)
		return true, nil
	}
}

// endFollow ends a stream of another replica's turn that stopped before
// the turn's __state__: it sends the stored history with errMsg.
func (h *Handler) endFollow(ctx context.Context, lw *lineWriter, th store.Thread, top int64, errMsg string) {
	var history []Message
	last := th.LastSort
	if msgs, err := h.st.Messages(ctx, th.AccountID, th.ChatID); err == nil {
		var l int64
		history, l = decodeHistory(msgs)
		last = max(last, l)
	} else if h.cfg.log != nil {
		h.cfg.log.LogAttrs(ctx, slog.LevelWarn, "chat history not read",
			slog.String("chatId", th.ChatID), slog.String("error", err.Error()))
	}
	m := stateMessage(th.ChatID, max(last, top+1), history, h.cfg.dev)
	m.State.Error = errMsg
	lw.send(m)
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
