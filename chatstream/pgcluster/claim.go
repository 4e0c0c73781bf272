package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/embedkit/embedkit/chatstream"
)

// claimAttempts bounds Claim's retries when the running claim it found
// ended before it could be read.
const claimAttempts = 5

// maxWriteBytes bounds the lines of one write (one transaction), so that
// the backlog of a long turn asked for late goes over several writes, each
// advancing it, while the other turns' lines and ends go too.
const maxWriteBytes = 4 << 20

// maxQuietEnds bounds the ends of unwatched turns in one write.
const maxQuietEnds = 1024

// claimedTurn is a [chatstream.ClaimedTurn] of a [Cluster].
type claimedTurn struct {
	c       *Cluster
	id      string
	key     chatstream.ThreadKey
	userID  int64
	aborted context.Context // canceled by abort
	abort   context.CancelFunc

	// Guarded by c.mu. A released claim stays in c.claims until the flush
	// that ends it.
	live bool              // the claim is committed: renew and poll it
	log  []chatstream.Line // the turn's log as last published; line i has seq i
	// written counts the lines of log in the database. They are written
	// only once watched: a reader on some replica asked for them.
	written  int
	watched  bool
	released bool
	gaveUp   time.Time     // when Release stopped waiting for the end
	ended    chan struct{} // made by Release, closed by finish
	endErr   error         // Release's result, set before ended closes
	// The turn's agent outlives it (Linger): a row of embedkit_turn_agents
	// is queued (in c.lingering), written (agentRow; tried once a write was
	// attempted, which may have committed though it failed), and deleted
	// once the agent has returned (back).
	agentRow, tried, back bool

	relOnce sync.Once
}

// Claim implements [chatstream.Cluster]: one INSERT ... ON CONFLICT DO
// UPDATE that takes the thread when its last claim ended or expired, or was
// left behind by this replica (a release that failed while the database was
// away): the caller runs no turn of the thread, so such a claim is stale.
// With limits, the INSERT runs in a transaction that first takes an
// advisory lock per account and counts the account's live claims and
// lingering agents, so that concurrent claims on every replica cannot pass
// the limits together.
func (c *Cluster) Claim(ctx context.Context, key chatstream.ThreadKey, userID int64, lim chatstream.TurnLimits) (chatstream.ClaimedTurn, error) {
	ct := &claimedTurn{c: c, id: newTurnID(), key: key, userID: userID}
	ct.aborted, ct.abort = context.WithCancel(context.Background())
	// Registered before the INSERT, so that an abort notification sent
	// right after the commit finds it.
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if c.threads[key] != nil {
		// The caller runs a turn of this thread already (the registry
		// prevents this; be safe anyway).
		c.mu.Unlock()
		return nil, &chatstream.TurnElsewhereError{UserID: userID}
	}
	c.claims[ct.id] = ct
	c.threads[key] = ct
	c.mu.Unlock()

	var err error
	if lim.Account > 0 || lim.User > 0 {
		err = c.claimLimited(ctx, ct, userID, lim)
	} else {
		err = c.claim(ctx, c.pool, ct, userID)
	}
	if err != nil {
		c.mu.Lock()
		delete(c.claims, ct.id)
		delete(c.threads, key)
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Lock()
	ct.live = true
	c.mu.Unlock()
	return ct, nil
}

// claimLimited is claim in a transaction that holds the account's
// advisory lock and checks lim first. It runs at READ COMMITTED whatever
// the database's default: at REPEATABLE READ the count would read a
// snapshot taken before the lock was granted, without the claim its last
// holder committed.
func (c *Cluster) claimLimited(ctx context.Context, ct *claimedTurn, userID int64, lim chatstream.TurnLimits) error {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("pgcluster: claim turn: %w", err)
	}
	defer func() {
		// After a commit, nothing; after a refusal, a rollback that a
		// database that stopped answering cannot hold for long.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = tx.Rollback(rctx)
		cancel()
	}()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('embedkit.turns', $1))", ct.key.AccountID); err != nil {
		return fmt.Errorf("pgcluster: claim turn: %w", err)
	}
	// The thread's own claim is left out: if it is live the INSERT below
	// finds it, and if not it stops counting once taken over. The agents
	// of ended turns that still run count too, each unless its turn's
	// claim is live and counted above (so neither counts twice). This
	// replica's agents whose rows are not written yet are counted from
	// memory, and their claims and rows left out of the query.
	pending, pendAll, pendMine := c.pendingAgents(ct.key.AccountID, userID)
	var all, mine int
	if err := tx.QueryRow(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE user_id = $3) FROM (
			SELECT user_id FROM embedkit_turns
			WHERE account_id = $1 AND chat_id <> $2 AND ended_at IS NULL AND heartbeat_at >= statement_timestamp() - make_interval(secs => $4)
				AND turn_id <> ALL($5)
			UNION ALL
			SELECT a.user_id FROM embedkit_turn_agents a
			WHERE a.account_id = $1 AND a.heartbeat_at >= statement_timestamp() - make_interval(secs => $4) AND a.turn_id <> ALL($5)
				AND NOT EXISTS (SELECT 1 FROM embedkit_turns t WHERE t.turn_id = a.turn_id AND t.chat_id <> $2
					AND t.ended_at IS NULL AND t.heartbeat_at >= statement_timestamp() - make_interval(secs => $4))) running`,
		ct.key.AccountID, ct.key.ChatID, userID, secs(c.cfg.lease), pending).Scan(&all, &mine); err != nil {
		return fmt.Errorf("pgcluster: count running turns: %w", err)
	}
	all, mine = all+pendAll, mine+pendMine
	switch {
	case lim.User > 0 && mine >= lim.User:
		return &chatstream.TurnLimitError{PerUser: true, Max: lim.User}
	case lim.Account > 0 && all >= lim.Account:
		return &chatstream.TurnLimitError{Max: lim.Account}
	}
	if err := c.claim(ctx, tx, ct, userID); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgcluster: claim turn: %w", err)
	}
	return nil
}

// pendingAgents returns the turn ids of this replica's lingering agents
// whose rows may not be written yet, and how many of them are of
// accountID, and of userID.
func (c *Cluster) pendingAgents(accountID, userID int64) (ids []string, account, user int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids = []string{} // not NULL: <> ALL(NULL) is NULL
	for id, ct := range c.lingering {
		ids = append(ids, id)
		if ct.key.AccountID == accountID {
			account++
			if ct.userID == userID {
				user++
			}
		}
	}
	return ids, account, user
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// claim inserts or takes over the thread's claim row for ct. Its times
// are the statement's, not the transaction's (now()): in claimLimited's
// transaction, which may have waited for the account's lock, now() would
// date the claim back and make it look expired to the next count.
func (c *Cluster) claim(ctx context.Context, q querier, ct *claimedTurn, userID int64) error {
	key := ct.key
	for range claimAttempts {
		var got string
		err := q.QueryRow(ctx, `INSERT INTO embedkit_turns AS t
				(account_id, chat_id, turn_id, owner, user_id, claimed_at, heartbeat_at, abort_requested, ended_at)
			VALUES ($1, $2, $3, $4, $5, statement_timestamp(), statement_timestamp(), false, NULL)
			ON CONFLICT (account_id, chat_id) DO UPDATE SET
				turn_id = EXCLUDED.turn_id, owner = EXCLUDED.owner, user_id = EXCLUDED.user_id,
				claimed_at = statement_timestamp(), heartbeat_at = statement_timestamp(), abort_requested = false, ended_at = NULL,
				watched = false
			WHERE t.ended_at IS NOT NULL OR t.heartbeat_at < statement_timestamp() - make_interval(secs => $6)
				-- A claim of this replica that it no longer holds (its
				-- release failed, e.g. while the database was away) is
				-- stale: this replica runs no turn of the thread.
				OR t.owner = EXCLUDED.owner
			RETURNING turn_id`,
			key.AccountID, key.ChatID, ct.id, c.cfg.replicaID, userID, secs(c.cfg.lease)).Scan(&got)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgcluster: claim turn: %w", err)
		}
		// A claim exists and was live when the INSERT looked.
		var owner int64
		var live bool
		err = q.QueryRow(ctx, `SELECT user_id, ended_at IS NULL AND heartbeat_at >= statement_timestamp() - make_interval(secs => $3)
			FROM embedkit_turns WHERE account_id = $1 AND chat_id = $2`,
			key.AccountID, key.ChatID, secs(c.cfg.lease)).Scan(&owner, &live)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // deleted meanwhile: try again
		case err != nil:
			return fmt.Errorf("pgcluster: read running turn: %w", err)
		case live:
			return &chatstream.TurnElsewhereError{UserID: owner}
		}
		// It ended or expired meanwhile: try again.
	}
	return fmt.Errorf("pgcluster: claim turn: the thread's claim changed %d times in a row", claimAttempts)
}

// Linger implements [chatstream.ClaimedTurn]: the next write (the one
// that ends the turn's claim, at the latest) inserts the turn's row of
// lingering agents from what this process knows of it, whatever becomes
// of the claim (ended, lost to a takeover, given up). Claims count the row
// only once the turn's own claim is no longer live, so the two never
// count at once. The heartbeat renews the row (and writes it again if
// another replica's cleanup deleted it while this one could not renew);
// the first write after returned deletes it.
func (ct *claimedTurn) Linger() (returned func()) {
	c := ct.c
	c.mu.Lock()
	if !ct.back && !ct.agentRow {
		c.lingering[ct.id] = ct
	}
	c.mu.Unlock()
	signal(c.endSig)
	return ct.agentReturned
}

// agentReturned has the next write delete the turn's row of lingering
// agents, if written; one not written yet is not written.
func (ct *claimedTurn) agentReturned() {
	c := ct.c
	c.mu.Lock()
	if ct.back {
		c.mu.Unlock()
		return
	}
	ct.back = true
	delete(c.lingering, ct.id)
	del := ct.agentRow || ct.tried
	if del {
		ct.agentRow = false
		delete(c.agents, ct.id)
		c.returned = append(c.returned, ct.id)
	}
	c.mu.Unlock()
	if del {
		signal(c.endSig)
	}
}

// Publish implements [chatstream.ClaimedTurn]. It keeps log, not a copy:
// a turn nobody watches costs no memory and no write per line.
func (ct *claimedTurn) Publish(log []chatstream.Line) {
	c := ct.c
	c.mu.Lock()
	if ct.released || c.closed || len(log) <= len(ct.log) {
		c.mu.Unlock()
		return
	}
	ct.log = log
	watched := ct.watched
	c.mu.Unlock()
	if watched {
		signal(c.flushSig)
	}
}

// watchLocal marks this replica's claim id watched, so that the flusher
// writes its lines from the first on.
func (c *Cluster) watchLocal(id string) {
	c.mu.Lock()
	ct, ok := c.claims[id]
	if !ok || ct.watched {
		c.mu.Unlock()
		return
	}
	ct.watched = true
	c.mu.Unlock()
	signal(c.flushSig)
}

// AfterAbort implements [chatstream.ClaimedTurn].
func (ct *claimedTurn) AfterAbort(f func()) (stop func() bool) {
	return context.AfterFunc(ct.aborted, f)
}

// Release implements [chatstream.ClaimedTurn]: ended_at (and, for a
// watched turn, its remaining lines and an eof row) goes with the
// flusher's next write, at once, together with every other turn ending
// meanwhile (one transaction for all of them).
func (ct *claimedTurn) Release(ctx context.Context, final []chatstream.Line) error {
	var err error // nil for the calls after the first
	ct.relOnce.Do(func() { err = ct.release(ctx, final) })
	return err
}

func (ct *claimedTurn) release(ctx context.Context, final []chatstream.Line) error {
	c := ct.c
	c.mu.Lock()
	ct.released = true // no more renewal, polls, aborts or lines
	delete(c.threads, ct.key)
	if c.closed {
		delete(c.claims, ct.id)
		c.mu.Unlock()
		return ErrClosed
	}
	ct.log = append(ct.log[:len(ct.log):len(ct.log)], final...) // never into the caller's array
	ct.ended = make(chan struct{})
	c.mu.Unlock()
	signal(c.endSig)

	select {
	case <-ct.ended:
		return ct.endErr
	case <-ctx.Done():
	}
	// Given up: renewal stops, and the flusher still ends the turn, its
	// lines first when a reader asked for them, with a write that succeeds
	// before the claim expired; it drops the claim after twice the lease
	// (a renewal in flight may have dated the claim's heartbeat after now).
	c.mu.Lock()
	ct.gaveUp = time.Now()
	c.mu.Unlock()
	select {
	case <-ct.ended:
		return ct.endErr
	default:
		return fmt.Errorf("pgcluster: release turn: %w", ctx.Err())
	}
}

// finish wakes the turn's Release with err; the caller holds c.mu, and the
// claim is no longer in c.claims.
func (ct *claimedTurn) finish(err error) {
	ct.endErr = err
	ct.log = nil // the caller's turn may stay reachable for a while
	close(ct.ended)
}

// pending are lines of one turn to write, from seq first on, and for end
// its eof row and ended_at. A turn nobody watches writes no line: for end
// (quiet) only its ended_at, unless a reader asked for its lines meanwhile.
type pending struct {
	ct    *claimedTurn
	first int
	lines []chatstream.Line
	end   bool
	quiet bool
}

// flushLoop writes the buffered lines of all claims and ends the released
// ones. Lines wait for the rest of the publish interval since the last
// write, so that they go out in batches; a release does not wait, and the
// releases that come while a write is in progress go with the next one.
// When the cluster closes it writes once more, then fails the releases
// still waiting with ErrClosed.
func (c *Cluster) flushLoop() {
	defer c.wg.Done()
	var (
		last    time.Time
		backoff time.Duration // after failed writes
	)
	for {
		select {
		case <-c.flushSig:
			if wait := c.cfg.publishInterval - time.Since(last); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-c.endSig:
				case <-c.ctx.Done():
				}
				t.Stop()
			}
		case <-c.endSig:
		case <-c.ctx.Done():
		}
		if c.ctx.Err() != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			// Again while a quiet end found a reader: its lines go now.
			more, err := c.flush(ctx)
			for more && err == nil {
				more, err = c.flush(ctx)
			}
			if err != nil {
				c.cfg.log.LogAttrs(ctx, slog.LevelWarn, "pgcluster: last write of lines failed",
					slog.String("replica", c.cfg.replicaID), slog.String("error", err.Error()))
			}
			cancel()
			c.mu.Lock()
			for id, ct := range c.claims {
				if ct.released {
					delete(c.claims, id)
					ct.finish(ErrClosed)
				}
			}
			c.mu.Unlock()
			return
		}
		last = time.Now()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		more, err := c.flush(ctx)
		cancel()
		if more {
			signal(c.endSig)
		}
		if err == nil {
			if backoff > 0 {
				c.cfg.log.LogAttrs(c.ctx, slog.LevelInfo, "pgcluster: writes of lines recovered",
					slog.String("replica", c.cfg.replicaID))
			}
			backoff = 0
			continue
		}
		if backoff == 0 { // one warning per run of failures
			c.warn("pgcluster: write of lines failed; retrying", err)
		}
		backoff = min(max(2*backoff, c.cfg.publishInterval), time.Second)
		if c.sleep(backoff) {
			signal(c.flushSig) // the lines went back to their buffers
		}
	}
}

// flush writes the rows of the lingering agents (and deletes those of the
// agents that returned), then the unwritten lines of every watched claim
// and the ends of the released ones, in one transaction, then wakes their
// Releases. The lines of one write are bounded (maxWriteBytes): what does
// not fit, and the end of its turn, goes with the next write, which the
// caller makes at once when more is true. On failure nothing of that
// transaction is marked written and the releases wait for the next flush;
// while an agent's row cannot be written, its turn's end waits too. A
// quiet end that finds its turn watched meanwhile is not ended: it goes
// with a next write too, lines and eof row included.
func (c *Cluster) flush(ctx context.Context) (more bool, err error) {
	c.mu.Lock()
	var ps []pending
	budget, quiet := maxWriteBytes, 0
	for id, ct := range c.claims {
		if !ct.gaveUp.IsZero() && time.Since(ct.gaveUp) > 2*c.cfg.lease {
			delete(c.claims, id)
			ct.finish(fmt.Errorf("pgcluster: release turn: %w", chatstream.ErrTurnLost))
			continue
		}
		switch n := len(ct.log); {
		case ct.watched && (n > ct.written || ct.released):
			to := ct.written
			for to < n && budget > 0 {
				budget -= len(ct.log[to].Data) + 64
				to++
			}
			if to < n {
				more = true
				if to == ct.written {
					continue // nothing of it fits this write
				}
			}
			ps = append(ps, pending{ct: ct, first: ct.written, lines: ct.log[ct.written:to:to], end: ct.released && to == n})
		case ct.released:
			if quiet++; quiet > maxQuietEnds {
				more = true
				continue
			}
			ps = append(ps, pending{ct: ct, end: true, quiet: true})
		}
	}
	lingering := slices.Collect(maps.Values(c.lingering))
	for _, ct := range lingering {
		ct.tried = true
	}
	returned := c.returned
	c.returned = nil
	c.mu.Unlock()
	// The rows of the lingering agents are written (and those of the
	// agents that returned deleted) first, on their own, so that they wait
	// for no end. The end of a turn whose row could not be written waits
	// for it: its claim counts it meanwhile.
	var agentsErr error
	if len(lingering) > 0 || len(returned) > 0 {
		agentsErr = c.writeAgents(ctx, lingering, returned)
	}
	c.mu.Lock()
	if agentsErr != nil {
		c.returned = append(c.returned, returned...)
		ps = slices.DeleteFunc(ps, func(p pending) bool { return p.end && c.lingering[p.ct.id] != nil })
	} else {
		for _, ct := range lingering {
			if c.lingering[ct.id] == ct { // its agent has not returned meanwhile
				delete(c.lingering, ct.id)
				ct.agentRow = true
				c.agents[ct.id] = ct
			}
		}
	}
	c.mu.Unlock()
	if len(ps) == 0 {
		return more, agentsErr
	}
	ended, watched, err := c.writeLines(ctx, ps)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		return false, err
	}
	for _, p := range ps {
		if !p.quiet {
			p.ct.written = p.first + len(p.lines)
		}
		switch {
		case !p.end:
		case watched[p.ct.id]:
			p.ct.watched = true
			more = true
		case ended[p.ct.id]:
			delete(c.claims, p.ct.id)
			p.ct.finish(nil)
		default:
			delete(c.claims, p.ct.id)
			p.ct.finish(fmt.Errorf("pgcluster: release turn: %w", chatstream.ErrTurnLost))
		}
	}
	return more, agentsErr
}

// writeLines inserts the lines of ps, and for those that end their eof
// rows and ended_at, and notifies their readers and those waiting for
// their end, in one implicit transaction (one round trip). ended holds the
// ending turns whose claim was still theirs; watched the quiet ones that a
// reader asked for meanwhile, left running.
func (c *Cluster) writeLines(ctx context.Context, ps []pending) (ended, watched map[string]bool, err error) {
	c.flushes.Add(1)
	var (
		b      pgx.Batch
		ids    []string
		seqs   []int32
		sorts  []int64
		states []bool
		eofs   []bool
		datas  [][]byte
		turns  []string
		ends   []string
		quiet  []string
	)
	add := func(id string, seq int, l chatstream.Line, eof bool) {
		ids = append(ids, id)
		seqs = append(seqs, int32(seq))
		sorts = append(sorts, l.Sort)
		states = append(states, l.State)
		eofs = append(eofs, eof)
		data := l.Data
		if data == nil {
			data = []byte{}
		}
		datas = append(datas, data)
	}
	for _, p := range ps {
		turns = append(turns, p.ct.id)
		if p.quiet {
			quiet = append(quiet, p.ct.id)
			continue
		}
		for i, l := range p.lines {
			add(p.ct.id, p.first+i, l, false)
		}
		if p.end {
			add(p.ct.id, p.first+len(p.lines), chatstream.Line{}, true)
			ends = append(ends, p.ct.id)
		}
	}
	if len(ids) > 0 {
		b.Queue(`INSERT INTO embedkit_turn_lines (turn_id, seq, sort, state, eof, data)
			SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::boolean[], $5::boolean[], $6::bytea[])
			ON CONFLICT (turn_id, seq) DO NOTHING`, ids, seqs, sorts, states, eofs, datas)
	}
	if len(ends) > 0 {
		// A claim taken over has another turn id: its row is left alone.
		b.Queue(`UPDATE embedkit_turns SET ended_at = coalesce(ended_at, statement_timestamp()), heartbeat_at = statement_timestamp()
			WHERE turn_id = ANY($1) RETURNING turn_id`, ends)
	}
	if len(quiet) > 0 {
		// A turn whose lines a reader asked for since the flush read its flag keeps
		// running: its reader needs the lines before the end.
		b.Queue(`UPDATE embedkit_turns SET
				ended_at = CASE WHEN watched THEN ended_at ELSE coalesce(ended_at, statement_timestamp()) END,
				heartbeat_at = CASE WHEN watched THEN heartbeat_at ELSE statement_timestamp() END
			WHERE turn_id = ANY($1) RETURNING turn_id, watched`, quiet)
	}
	if len(turns) > 0 {
		b.Queue(`SELECT pg_notify($1, t) FROM unnest($2::text[]) t`, chanLines, turns)
	}

	br := c.pool.SendBatch(ctx, &b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			ended, watched, err = nil, nil, cerr
		}
	}()
	if len(ids) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, nil, err
		}
	}
	ended = make(map[string]bool, len(ends)+len(quiet))
	if len(ends) > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, nil, err
		}
		for _, id := range got {
			ended[id] = true
		}
	}
	if len(quiet) > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, err
		}
		type row struct {
			ID      string
			Watched bool
		}
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			return nil, nil, err
		}
		for _, r := range got {
			if r.Watched {
				if watched == nil {
					watched = make(map[string]bool)
				}
				watched[r.ID] = true
			} else {
				ended[r.ID] = true
			}
		}
	}
	if len(turns) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, nil, err
		}
	}
	return ended, watched, nil
}

// writeAgents writes the rows of lingering agents (or renews them where
// they exist) and deletes those of returned, in one implicit transaction.
func (c *Cluster) writeAgents(ctx context.Context, cts []*claimedTurn, returned []string) error {
	var b pgx.Batch
	if len(cts) > 0 {
		ids, accounts, users := make([]string, len(cts)), make([]int64, len(cts)), make([]int64, len(cts))
		for i, ct := range cts {
			ids[i], accounts[i], users[i] = ct.id, ct.key.AccountID, ct.userID
		}
		b.Queue(`INSERT INTO embedkit_turn_agents (turn_id, account_id, user_id, owner, heartbeat_at)
			SELECT t, a, u, $4, statement_timestamp() FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(t, a, u)
			ON CONFLICT (turn_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at`, ids, accounts, users, c.cfg.replicaID)
	}
	if len(returned) > 0 {
		b.Queue(`DELETE FROM embedkit_turn_agents WHERE turn_id = ANY($1)`, returned)
	}
	if err := c.pool.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("pgcluster: record running agents: %w", err)
	}
	return nil
}
