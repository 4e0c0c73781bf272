// Package pgcluster implements [chatstream.Cluster] on PostgreSQL alone,
// with pgx: the replicas of a server that share one database share their
// running chat turns through three tables and LISTEN/NOTIFY, with no other
// infrastructure.
//
//	cl, err := pgcluster.New(ctx, "postgres://app@db/app?sslmode=require",
//		pgcluster.WithLogger(log))
//	if err != nil {
//		return err
//	}
//	defer cl.Close() // after the chat handler's Shutdown
//	chat := chatstream.NewHandler(st, agent, chatstream.WithCluster(cl))
//
// Every replica of the server does the same with the same database; no
// sticky routing is needed.
//
// # How it works
//
// New creates, if missing, three tables in the first schema of the DSN's
// search_path:
//
//	embedkit_turns        one row per thread: its last claim (turn id, owner
//	                      replica, user, heartbeat, abort flag, end time,
//	                      watched: a reader asked for the turn's lines)
//	embedkit_turn_lines   the running turns' logs: (turn_id, seq) → sort,
//	                      data; an eof row marks the end of a turn
//	embedkit_turn_agents  the agents of ended turns that still run
//	                      (aborted or timed out, their agent not returned
//	                      yet): turn id, account, user, heartbeat
//
// Claim is one INSERT ... ON CONFLICT DO UPDATE that succeeds only when the
// thread's last claim ended or its heartbeat is older than the lease
// ([WithLeaseTimeout]); each replica renews all of its claims with one UPDATE
// per heartbeat ([WithHeartbeat]), so a crashed replica's turns can be taken
// over once their lease expires. Time is the database's clock (now()), so
// replicas' clocks do not matter.
//
// A turn that ends while its agent still runs (aborted, timed out:
// [chatstream.ClaimedTurn.Linger]) gets a row in embedkit_turn_agents,
// written by the flusher before the turn's end, renewed by the heartbeat
// (a second UPDATE, only while there are such rows) and deleted once the
// agent returns; a claim with limits counts these rows with the live
// claims, and the rows not written yet from memory. Rows of a replica that
// stopped renewing them are deleted after twice the lease.
//
// Abort sets abort_requested and calls pg_notify('embedkit_abort', turn id)
// in one statement. Every replica keeps one dedicated connection that
// LISTENs; the owner closes the turn's [chatstream.ClaimedTurn.Aborted] as
// the notification arrives. A poll of abort requests and readers' requests for lines ([WithPollInterval])
// catches notifications lost while that connection was down; it is
// pinged when idle for 15 s (so a silently dead one is found), reconnected
// with backoff, and polls at once after reconnecting.
//
// A turn's published log is kept in memory (the caller's own, not a copy)
// and written only for the turns whose lines a reader asked for: most
// turns are never rejoined from another replica, and writing every line
// of every turn was most of the cluster's work on the database. The
// first [chatstream.RemoteTurn.Next] of a reader sets watched and calls
// pg_notify('embedkit_watch', turn id) in one statement; the owner learns
// of it from the LISTEN connection (or the poll) and writes that turn's
// lines from the first on. [chatstream.RemoteTurn.Wait], an abort's wait
// for the end, asks for nothing. One flusher per Cluster writes the
// unwritten lines of all its watched turns in one multi-row INSERT at
// most every publish interval ([WithPublishInterval]), at most 4 MiB of
// lines per write (the backlog of a long turn asked for late goes over
// several, each advancing it, the other turns' ends beside them), and
// notifies 'embedkit_lines' with the ids of the turns written or ended,
// which wakes their readers and waiters on every replica, fanned out from
// the LISTEN connection through channels, with a poll as fallback.
// Release hands its turn to the flusher, which writes at once, without
// waiting for the publish interval: the lines, eof rows and ended_at of
// every turn ending meanwhile go in the same transaction, and the
// releases that come during a write go with the next one. A turn nobody
// watched ends with ended_at alone, in a statement that leaves a turn
// asked for meanwhile running: its lines and eof row go first, so that a
// reader that asked is never told of an end before the lines; such a
// turn is renewed until they are written. A reader that asks only after
// the end reads the lines another reader's request had written, or is
// told the turn ended: its answer is stored, which the caller serves
// instead. Lines of ended turns are
// deleted after [WithRetention] by whichever replica takes an advisory
// lock first.
//
// [WithListen](false) runs without LISTEN, by polling alone, for connection
// poolers in transaction mode (PgBouncer) that cannot hold a LISTEN (add
// default_query_exec_mode=exec to such a DSN, as for any pgx client there).
//
// # Connections
//
// A Cluster holds its own pgxpool and one more connection for LISTEN. The
// pool has the DSN's pool_max_conns connections or, without it, four per
// core the Go runtime may use (runtime.GOMAXPROCS), at least 16: every
// chat opening's claim takes one while the writes of lines and releases
// hold theirs. Its
// connections show in pg_stat_activity as application_name "embedkit-cluster
// <replica id>" (unless the DSN sets one) and "embedkit-listen <replica
// id>".
package pgcluster
