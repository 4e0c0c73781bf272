package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/embedkit/embedkit/chatstream"
)

// maxReadLines bounds the lines one Next returns.
const maxReadLines = 1000

// Abort implements [chatstream.Cluster]: one statement sets abort_requested
// on the thread's live claim and notifies its owner; a claim of this
// process is aborted at once.
func (c *Cluster) Abort(ctx context.Context, key chatstream.ThreadKey) (bool, error) {
	if c.isClosed() {
		return false, ErrClosed
	}
	rows, err := c.pool.Query(ctx, `WITH u AS (
			UPDATE embedkit_turns SET abort_requested = true
			WHERE account_id = $1 AND chat_id = $2 AND ended_at IS NULL
				AND heartbeat_at >= now() - make_interval(secs => $3)
			RETURNING turn_id)
		SELECT u.turn_id FROM u CROSS JOIN LATERAL (SELECT pg_notify($4, u.turn_id)) n`,
		key.AccountID, key.ChatID, secs(c.cfg.lease), chanAbort)
	if err != nil {
		return false, fmt.Errorf("pgcluster: abort turn: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("pgcluster: abort turn: %w", err)
	}
	c.abortLocal(ids)
	return len(ids) > 0, nil
}

// Join implements [chatstream.Cluster].
func (c *Cluster) Join(ctx context.Context, key chatstream.ThreadKey) (chatstream.RemoteTurn, bool, error) {
	if c.isClosed() {
		return nil, false, ErrClosed
	}
	rt := &remoteTurn{c: c, key: key}
	err := c.pool.QueryRow(ctx, `SELECT turn_id, user_id FROM embedkit_turns
		WHERE account_id = $1 AND chat_id = $2 AND ended_at IS NULL
			AND heartbeat_at >= now() - make_interval(secs => $3)`,
		key.AccountID, key.ChatID, secs(c.cfg.lease)).Scan(&rt.id, &rt.userID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("pgcluster: join turn: %w", err)
	}
	return rt, true, nil
}

func (c *Cluster) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// remoteTurn is a [chatstream.RemoteTurn] of a [Cluster].
type remoteTurn struct {
	c      *Cluster
	key    chatstream.ThreadKey
	id     string
	userID int64

	asked atomic.Bool // the owner was asked for the turn's lines
}

// UserID implements [chatstream.RemoteTurn].
func (rt *remoteTurn) UserID() int64 { return rt.userID }

// Next implements [chatstream.RemoteTurn]. Its first call asks the turn's
// owner for the turn's lines (see ask). It reads the lines from from on;
// when there are none it checks that the turn is still live and waits for a
// notification of the turn or the poll interval.
func (rt *remoteTurn) Next(ctx context.Context, from int) ([]chatstream.Line, bool, error) {
	c := rt.c
	if !rt.asked.Load() {
		qctx, cancel := context.WithTimeout(ctx, opTimeout)
		live, err := rt.ask(qctx)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, false, ctx.Err()
		case err != nil && !errors.Is(err, chatstream.ErrTurnLost) && c.isClosed():
			return nil, false, fmt.Errorf("pgcluster: read turn: %w", ErrClosed)
		case err != nil:
			return nil, false, fmt.Errorf("pgcluster: read turn: %w", err)
		case !live:
			// It ended. Its lines are written only when another reader
			// asked for them in time; otherwise its answer is stored.
			qctx, cancel := context.WithTimeout(ctx, opTimeout)
			lines, done, err := rt.read(qctx, from)
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return nil, false, ctx.Err()
			case err != nil && c.isClosed():
				return nil, false, fmt.Errorf("pgcluster: read turn: %w", ErrClosed)
			case err != nil:
				return nil, false, fmt.Errorf("pgcluster: read turn: %w", err)
			case len(lines) == 0 && !done:
				return nil, true, nil
			}
			rt.asked.Store(true)
			return lines, done, nil
		}
	}
	for {
		// Watch before reading, so that a notification sent between the
		// read and the wait is not missed.
		w, ch := c.watch(rt.id)
		// Each look is bounded: a connection that died silently must not
		// hold the reader until its ctx ends.
		qctx, cancel := context.WithTimeout(ctx, opTimeout)
		lines, done, err := rt.read(qctx, from)
		if err == nil && len(lines) == 0 && !done {
			var live bool
			if live, err = rt.live(qctx); err == nil && !live {
				// It ended (or died) after the read: read once more. An
				// end commits the turn's last lines with its eof row, but
				// one read returns at most maxReadLines of them: lines
				// without the eof row go to the caller, whose next call
				// reads on (and finds the eof row, or nothing: lost).
				if lines, done, err = rt.read(qctx, from); err == nil && !done && len(lines) == 0 {
					err = chatstream.ErrTurnLost
				}
			}
		}
		cancel()
		if err != nil || len(lines) > 0 || done {
			c.unwatch(rt.id, w)
			if err != nil {
				if ctx.Err() != nil {
					return lines, false, ctx.Err()
				}
				if !errors.Is(err, chatstream.ErrTurnLost) && c.isClosed() {
					err = ErrClosed
				}
				return lines, false, fmt.Errorf("pgcluster: read turn: %w", err)
			}
			return lines, done, nil
		}
		if err := c.await(ctx, rt.id, w, ch); err != nil {
			if errors.Is(err, ErrClosed) {
				err = fmt.Errorf("pgcluster: read turn: %w", err)
			}
			return nil, false, err
		}
	}
}

// ask sets the turn's watched flag, and notifies its owner (which polls the
// flag otherwise), so that the owner writes the turn's lines from the
// first on; it reports false when the turn ended, and an error wrapping
// chatstream.ErrTurnLost when its claim expired or was taken over. An
// owner that ends the turn unwatched checks the flag in the same statement
// that ends it, so a turn is either watched before its end, its lines and
// eof row all written, or ended with its answer stored and none of them.
func (rt *remoteTurn) ask(ctx context.Context) (bool, error) {
	c := rt.c
	rows, err := c.pool.Query(ctx, `WITH u AS (
			UPDATE embedkit_turns SET watched = true
			WHERE turn_id = $1 AND ended_at IS NULL AND heartbeat_at >= now() - make_interval(secs => $2)
			RETURNING turn_id)
		SELECT u.turn_id FROM u CROSS JOIN LATERAL (SELECT pg_notify($3, u.turn_id)) n`,
		rt.id, secs(c.cfg.lease), chanWatch)
	if err != nil {
		return false, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, err
	}
	if len(ids) > 0 {
		rt.asked.Store(true)
		c.watchLocal(rt.id) // a turn of this process, where the caller did not look
		return true, nil
	}
	var ended bool
	err = c.pool.QueryRow(ctx, `SELECT ended_at IS NOT NULL FROM embedkit_turns WHERE turn_id = $1`, rt.id).Scan(&ended)
	switch {
	case err == nil && ended:
		return false, nil
	case err == nil || errors.Is(err, pgx.ErrNoRows):
		return false, chatstream.ErrTurnLost // expired, or taken over
	}
	return false, err
}

// Wait implements [chatstream.RemoteTurn]: it checks that the turn is
// still live and waits for a notification of the turn (every end sends
// one) or the poll interval, until it is not. It does not ask for the
// turn's lines.
func (rt *remoteTurn) Wait(ctx context.Context) error {
	c := rt.c
	for {
		w, ch := c.watch(rt.id)
		qctx, cancel := context.WithTimeout(ctx, opTimeout)
		live, err := rt.live(qctx)
		cancel()
		if err != nil || !live {
			c.unwatch(rt.id, w)
			switch {
			case err == nil:
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			case c.isClosed():
				err = ErrClosed
			}
			return fmt.Errorf("pgcluster: wait for turn: %w", err)
		}
		if err := c.await(ctx, rt.id, w, ch); err != nil {
			if errors.Is(err, ErrClosed) {
				err = fmt.Errorf("pgcluster: wait for turn: %w", err)
			}
			return err
		}
	}
}

// await waits for a notification of turn id (ch, from watch), the poll
// interval, or the end of ctx or of the cluster, then drops the watch w.
// It returns ctx's error, or ErrClosed once the cluster closed.
func (c *Cluster) await(ctx context.Context, id string, w *waiter, ch <-chan struct{}) error {
	t := time.NewTimer(c.cfg.pollInterval)
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	t.Stop()
	c.unwatch(id, w)
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	return nil
}

// read returns the consecutive lines from seq from on, and whether the eof
// row follows them.
func (rt *remoteTurn) read(ctx context.Context, from int) ([]chatstream.Line, bool, error) {
	rows, err := rt.c.pool.Query(ctx, `SELECT seq, sort, state, eof, data FROM embedkit_turn_lines
		WHERE turn_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3`, rt.id, from, maxReadLines)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var (
		lines []chatstream.Line
		eof   bool
		next  = from
	)
	for rows.Next() {
		var (
			seq      int
			l        chatstream.Line
			lastLine bool
		)
		if err := rows.Scan(&seq, &l.Sort, &l.State, &lastLine, &l.Data); err != nil {
			return nil, false, err
		}
		if seq != next {
			break // a gap: the rest is not committed yet
		}
		if lastLine {
			eof = true
			break
		}
		lines = append(lines, l)
		next++
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return lines, eof, nil
}

// live reports whether the turn still holds a live claim.
func (rt *remoteTurn) live(ctx context.Context) (bool, error) {
	var live bool
	err := rt.c.pool.QueryRow(ctx, `SELECT turn_id = $3 AND ended_at IS NULL
			AND heartbeat_at >= now() - make_interval(secs => $4)
		FROM embedkit_turns WHERE account_id = $1 AND chat_id = $2`,
		rt.key.AccountID, rt.key.ChatID, rt.id, secs(rt.c.cfg.lease)).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return live, err
}

// waiter is the wake-up channel shared by the readers of one turn; it is
// closed by the next notification of the turn.
type waiter struct {
	ch chan struct{}
	n  int // readers holding it
}

func (c *Cluster) watch(id string) (*waiter, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiters[id]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		c.waiters[id] = w
	}
	w.n++
	return w, w.ch
}

func (c *Cluster) unwatch(id string, w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.n--
	if w.n == 0 && c.waiters[id] == w {
		delete(c.waiters, id)
	}
}

// wake wakes the readers of turn id.
func (c *Cluster) wake(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.waiters[id]; w != nil {
		close(w.ch)
		delete(c.waiters, id)
	}
}

// wakeAll wakes every reader.
func (c *Cluster) wakeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, w := range c.waiters {
		close(w.ch)
		delete(c.waiters, id)
	}
}
