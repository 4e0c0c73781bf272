package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/embedkit/embedkit/chatstream"
)

// ErrClosed is returned by the methods of a closed [Cluster].
var ErrClosed = errors.New("pgcluster: cluster closed")

// Notification channels. They are database-wide; payloads are turn ids,
// which are random, so clusters in other schemas of the database only cause
// a spurious wake-up.
const (
	chanAbort = "embedkit_abort"
	chanLines = "embedkit_lines"
	chanWatch = "embedkit_watch" // a reader asked for the turn's lines: write them
)

// schema creates the tables; it runs under an advisory lock so that
// replicas starting together do not race on CREATE TABLE IF NOT EXISTS.
var schema = []string{
	`SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.embedkit_turns schema'))`,
	`CREATE TABLE IF NOT EXISTS embedkit_turns (
		account_id      bigint      NOT NULL,
		chat_id         text        NOT NULL,
		turn_id         text        NOT NULL UNIQUE,
		owner           text        NOT NULL,
		user_id         bigint      NOT NULL,
		claimed_at      timestamptz NOT NULL DEFAULT now(),
		heartbeat_at    timestamptz NOT NULL DEFAULT now(),
		abort_requested boolean     NOT NULL DEFAULT false,
		ended_at        timestamptz,
		watched         boolean     NOT NULL DEFAULT false,
		PRIMARY KEY (account_id, chat_id)
	)`,
	// watched came after the first release. ALTER TABLE locks the table
	// even when the column exists, so the catalog is asked first.
	`DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = 'embedkit_turns' AND column_name = 'watched') THEN
			ALTER TABLE embedkit_turns ADD COLUMN watched boolean NOT NULL DEFAULT false;
		END IF;
	END $$`,
	// The running turns of an account, which a claim with limits counts.
	`CREATE INDEX IF NOT EXISTS embedkit_turns_running ON embedkit_turns (account_id, user_id) WHERE ended_at IS NULL`,
	// The agents of released turns that still run (ClaimedTurn.Linger),
	// which a claim with limits counts too.
	`CREATE TABLE IF NOT EXISTS embedkit_turn_agents (
		turn_id      text        PRIMARY KEY,
		account_id   bigint      NOT NULL,
		user_id      bigint      NOT NULL,
		owner        text        NOT NULL,
		heartbeat_at timestamptz NOT NULL DEFAULT now()
	)`,
	`CREATE INDEX IF NOT EXISTS embedkit_turn_agents_account ON embedkit_turn_agents (account_id, user_id)`,
	`CREATE TABLE IF NOT EXISTS embedkit_turn_lines (
		turn_id    text        NOT NULL,
		seq        integer     NOT NULL,
		sort       bigint      NOT NULL,
		state      boolean     NOT NULL DEFAULT false,
		eof        boolean     NOT NULL DEFAULT false,
		data       bytea       NOT NULL,
		written_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (turn_id, seq)
	)`,
}

// opTimeout bounds each background statement.
const opTimeout = 5 * time.Second

// Cluster is a [chatstream.Cluster] on PostgreSQL. It owns a connection
// pool, one LISTEN connection and four goroutines (flusher, heartbeat,
// poll, and the listener unless WithListen(false)), all stopped by
// [Cluster.Close]. It is safe for concurrent
// use.
type Cluster struct {
	cfg     config
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	flushSig chan struct{} // buffered lines wait; cap 1
	endSig   chan struct{} // a release waits; cap 1
	pollSig  chan struct{} // poll aborts now; cap 1

	listening atomic.Bool
	flushes   atomic.Int64 // writes of lines, for tests
	pings     atomic.Int64 // pings of the LISTEN connection, for tests

	mu      sync.Mutex
	claims  map[string]*claimedTurn               // by turn id
	threads map[chatstream.ThreadKey]*claimedTurn // the claims not released
	waiters map[string]*waiter                    // readers waiting for lines, by turn id
	// The lingering agents (claimedTurn.Linger): those whose rows of
	// embedkit_turn_agents are not written yet (the flush writes them, and
	// claims here count them in memory meanwhile), those written (which
	// the heartbeat renews), and the turn ids whose rows the next flush
	// deletes (their agents returned).
	lingering map[string]*claimedTurn
	agents    map[string]*claimedTurn
	returned  []string
	closed    bool
}

var _ chatstream.Cluster = (*Cluster)(nil)

// New connects to the PostgreSQL database named by dsn (a URL or
// keyword/value string, as pgx accepts; search_path may be set as a
// parameter), creates the tables if missing and starts the background
// goroutines. ctx bounds the connection and the creation of the tables.
func New(ctx context.Context, dsn string, opts ...Option) (*Cluster, error) {
	cfg := newConfig(opts)
	if cfg.heartbeat >= cfg.lease {
		return nil, fmt.Errorf("pgcluster: heartbeat %v must be shorter than the lease timeout %v", cfg.heartbeat, cfg.lease)
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("pgcluster: invalid DSN") // the DSN may hold a password: never echo it
	}
	if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "embedkit-cluster " + cfg.replicaID
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// As the store's pool (gormstore/postgres.PoolSize): every opening's
		// claim waits for a connection while the flusher's and the
		// releases' transactions hold theirs, and pgx's default (4 on 2
		// cores) queued the openings.
		pcfg.MaxConns = int32(max(16, 4*runtime.GOMAXPROCS(0)))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: connect: %w", err)
	}
	if err := createSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{
		cfg:       cfg,
		pool:      pool,
		connCfg:   pcfg.ConnConfig,
		ctx:       cctx,
		cancel:    cancel,
		flushSig:  make(chan struct{}, 1),
		endSig:    make(chan struct{}, 1),
		pollSig:   make(chan struct{}, 1),
		claims:    make(map[string]*claimedTurn),
		threads:   make(map[chatstream.ThreadKey]*claimedTurn),
		agents:    make(map[string]*claimedTurn),
		lingering: make(map[string]*claimedTurn),
		waiters:   make(map[string]*waiter),
	}
	c.wg.Add(3)
	go c.flushLoop()
	go c.heartbeatLoop()
	go c.pollLoop()
	if cfg.listen {
		c.wg.Add(1)
		go c.listenLoop()
	}
	return c, nil
}

func createSchema(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, q := range schema {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgcluster: create tables: %w", err)
	}
	return nil
}

// Close stops the background goroutines after one last write of the
// buffered lines (bounded by a few seconds), closes the connections and
// waits for all of it. Claims not released stay in the database and expire
// after the lease timeout, as if the process had crashed: call the chat
// handler's Shutdown first. Remote readers blocked in Next return
// [ErrClosed]. Close is idempotent and returns nil.
func (c *Cluster) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		c.wg.Wait()
		c.pool.Close()
	})
	return nil
}

// ReplicaID returns the id of this process in the claims it writes.
func (c *Cluster) ReplicaID() string { return c.cfg.replicaID }

func newTurnID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// secs turns a duration into the float seconds make_interval takes.
func secs(d time.Duration) float64 { return d.Seconds() }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleep waits d or until the cluster closes; it reports whether d passed.
func (c *Cluster) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

func (c *Cluster) warn(msg string, err error, attrs ...slog.Attr) {
	if c.ctx.Err() != nil {
		return // closing: failures are expected
	}
	attrs = append(attrs, slog.String("replica", c.cfg.replicaID), slog.String("error", err.Error()))
	c.cfg.log.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}

// liveClaims returns the ids of the claims to renew.
func (c *Cluster) liveClaims() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.claims))
	for id, ct := range c.claims {
		// A released turn found watched at its end is renewed until its
		// lines are written (or its Release gives up): its backlog may
		// take several writes.
		if ct.live && (!ct.released || ct.watched && ct.gaveUp.IsZero()) {
			ids = append(ids, id)
		}
	}
	return ids
}

// polledClaims returns the ids of the live claims, and those of them not
// known to be watched.
func (c *Cluster) polledClaims() (ids, unwatched []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, ct := range c.claims {
		if ct.live && !ct.released {
			ids = append(ids, id)
			if !ct.watched {
				unwatched = append(unwatched, id)
			}
		}
	}
	return ids, unwatched
}

// heartbeatLoop renews the live claims, one UPDATE per heartbeat, closes
// Aborted of the claims found taken over or asked to abort, and deletes old
// lines now and then.
func (c *Cluster) heartbeatLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(c.cfg.heartbeat)
	defer tick.Stop()
	cleanupEvery := max(c.cfg.retention/2, c.cfg.heartbeat)
	lastCleanup := time.Now()
	for {
		select {
		case <-tick.C:
		case <-c.ctx.Done():
			return
		}
		if ids := c.liveClaims(); len(ids) > 0 {
			c.renew(ids)
		}
		c.renewAgents()
		if time.Since(lastCleanup) >= cleanupEvery {
			lastCleanup = time.Now()
			c.cleanup()
		}
	}
}

func (c *Cluster) renew(ids []string) {
	ctx, cancel := context.WithTimeout(c.ctx, min(opTimeout, c.cfg.lease))
	defer cancel()
	rows, err := c.pool.Query(ctx, `UPDATE embedkit_turns SET heartbeat_at = now()
		WHERE turn_id = ANY($1) AND owner = $2 AND ended_at IS NULL
		RETURNING turn_id, abort_requested`, ids, c.cfg.replicaID)
	if err != nil {
		c.warn("pgcluster: heartbeat failed", err)
		return
	}
	kept := make(map[string]bool, len(ids))
	var aborted []string
	for rows.Next() {
		var id string
		var abort bool
		if err := rows.Scan(&id, &abort); err != nil {
			rows.Close()
			c.warn("pgcluster: heartbeat failed", err)
			return
		}
		kept[id] = true
		if abort {
			aborted = append(aborted, id)
		}
	}
	if err := rows.Err(); err != nil {
		c.warn("pgcluster: heartbeat failed", err)
		return
	}
	for _, id := range ids {
		if !kept[id] {
			aborted = append(aborted, id) // taken over or gone: the turn must stop
		}
	}
	c.abortLocal(aborted)
}

// renewAgents renews this replica's rows of lingering agents, if any. A
// row that is gone (another replica's cleanup deleted it while this one
// could not renew it) is written again by the next flush.
func (c *Cluster) renewAgents() {
	c.mu.Lock()
	ids := slices.Collect(maps.Keys(c.agents))
	c.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, min(opTimeout, c.cfg.lease))
	defer cancel()
	rows, err := c.pool.Query(ctx, `UPDATE embedkit_turn_agents SET heartbeat_at = now() WHERE turn_id = ANY($1) RETURNING turn_id`, ids)
	var kept []string
	if err == nil {
		kept, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		c.warn("pgcluster: heartbeat of running agents failed", err)
		return
	}
	if len(kept) == len(ids) {
		return
	}
	c.mu.Lock()
	for _, id := range ids {
		if ct := c.agents[id]; ct != nil && !slices.Contains(kept, id) {
			delete(c.agents, id)
			ct.agentRow = false
			c.lingering[id] = ct
		}
	}
	c.mu.Unlock()
	signal(c.endSig)
}

// abortLocal closes Aborted of this replica's claims among ids that are
// not released.
func (c *Cluster) abortLocal(ids []string) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	var hit []*claimedTurn
	for _, id := range ids {
		if ct, ok := c.claims[id]; ok && !ct.released {
			hit = append(hit, ct)
		}
	}
	c.mu.Unlock()
	for _, ct := range hit {
		ct.abort()
	}
}

// cleanup deletes the lines of turns that ended (or died) more than the
// retention ago, and old claim rows. One replica at a time does it (an
// advisory lock taken without waiting); the others skip.
func (c *Cluster) cleanup() {
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtext(current_schema() || '.embedkit_turns cleanup'))`).Scan(&got); err != nil || !got {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM embedkit_turn_lines WHERE turn_id IN (
				SELECT l.turn_id FROM embedkit_turn_lines l GROUP BY l.turn_id
				HAVING max(l.written_at) < now() - make_interval(secs => $1)
				AND NOT EXISTS (SELECT 1 FROM embedkit_turns t WHERE t.turn_id = l.turn_id
					AND t.ended_at IS NULL AND t.heartbeat_at >= now() - make_interval(secs => $2)))`,
			secs(c.cfg.retention), secs(c.cfg.lease)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM embedkit_turns
			WHERE coalesce(ended_at, heartbeat_at) < now() - make_interval(secs => $1)`,
			secs(c.cfg.retention+c.cfg.lease)); err != nil {
			return err
		}
		// The agents of a replica that stopped renewing them (a crash).
		_, err := tx.Exec(ctx, `DELETE FROM embedkit_turn_agents WHERE heartbeat_at < now() - make_interval(secs => $1)`,
			secs(2*c.cfg.lease))
		return err
	})
	if err != nil {
		c.warn("pgcluster: cleanup of ended turns failed", err)
	}
}

// pollLoop polls the abort requests of the live claims, and the readers'
// requests for the lines of those not known to be watched: the fallback
// for a lost notification.
func (c *Cluster) pollLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(c.cfg.pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-c.pollSig:
		case <-c.ctx.Done():
			return
		}
		ids, unwatched := c.polledClaims()
		if len(ids) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		rows, err := c.pool.Query(ctx, `SELECT turn_id, abort_requested, watched FROM embedkit_turns
			WHERE turn_id = ANY($1) AND (abort_requested OR watched AND turn_id = ANY($2))`, ids, unwatched)
		var aborted, watched []string
		if err == nil {
			var (
				id           string
				abort, watch bool
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &abort, &watch}, func() error {
				if abort {
					aborted = append(aborted, id)
				}
				if watch {
					watched = append(watched, id)
				}
				return nil
			})
		}
		cancel()
		if err != nil {
			c.warn("pgcluster: poll of abort requests failed", err)
			continue
		}
		c.abortLocal(aborted)
		for _, id := range watched {
			c.watchLocal(id)
		}
	}
}

// listenLoop holds the LISTEN connection, reconnecting with backoff, and
// dispatches notifications.
func (c *Cluster) listenLoop() {
	defer c.wg.Done()
	const minBackoff, maxBackoff = 50 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for c.ctx.Err() == nil {
		connected, err := c.listenOnce()
		if c.ctx.Err() != nil {
			return
		}
		c.warn("pgcluster: LISTEN connection lost; reconnecting", err)
		if connected {
			backoff = minBackoff
		}
		if !c.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// listenOnce connects, listens and dispatches until the connection fails;
// connected reports whether LISTEN succeeded.
func (c *Cluster) listenOnce() (connected bool, err error) {
	cfg := c.connCfg.Copy()
	cfg.RuntimeParams["application_name"] = "embedkit-listen " + c.cfg.replicaID
	conn, err := pgx.ConnectConfig(c.ctx, cfg)
	if err != nil {
		return false, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
	}()
	for _, ch := range []string{chanAbort, chanLines, chanWatch} {
		if _, err := conn.Exec(c.ctx, "LISTEN "+ch); err != nil {
			return false, err
		}
	}
	c.listening.Store(true)
	defer c.listening.Store(false)
	// Notifications sent while no connection listened are lost: readers
	// read again, and abort requests are polled now.
	c.wakeAll()
	signal(c.pollSig)
	for {
		// Wait at most listenPing, then ping: a connection that died
		// silently (a network partition) is found and replaced.
		wctx, cancel := context.WithTimeout(c.ctx, c.cfg.listenPing)
		n, err := conn.WaitForNotification(wctx)
		timedOut := wctx.Err() != nil && c.ctx.Err() == nil
		cancel()
		if n != nil {
			c.dispatch(n)
		}
		if err == nil {
			continue
		}
		if !timedOut || conn.IsClosed() {
			return true, err
		}
		pctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return true, fmt.Errorf("ping: %w", err)
		}
		c.pings.Add(1)
	}
}

func (c *Cluster) dispatch(n *pgconn.Notification) {
	switch n.Channel {
	case chanAbort:
		c.abortLocal([]string{n.Payload})
	case chanLines:
		c.wake(n.Payload)
	case chanWatch:
		c.watchLocal(n.Payload)
	}
}
