package chatstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/embedkit/embedkit/internal/lru"
	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// Paths of the chat endpoints, with {accountName} and {agentId} wildcards
// (http.ServeMux and gorilla/mux syntax).
const (
	StreamPattern = "/api/v1/public/{accountName}/agents/{agentId}/chat/stream-chat-state"
	AbortPattern  = "/api/v1/public/{accountName}/agents/{agentId}/chat/abort"
)

// Route is one endpoint of the handler: mount Handler for Method and Pattern
// on any router that fills r.PathValue (http.ServeMux does; for gorilla/mux
// use middleware.PathValues(mux.Vars)).
type Route struct {
	Method  string
	Pattern string
	Handler http.Handler
}

// Handler serves the chat API: stream-chat-state and abort. It owns a
// registry of running turns; call [Handler.Shutdown] (or [Handler.Close])
// when the server stops. A Handler is safe for concurrent use.
type Handler struct {
	st      store.Store
	agent   Agent
	cfg     config
	turns   *registry
	persist *persister
	tel     *telemetry.Telemetry
	// owners holds the user id of recent turns by external or internal id
	// (see turnOwner).
	owners *lru.Cache[ownerKey, int64]
	// data is the agent when it is a DataAgent, for the data query API.
	data DataAgent
}

// ownerHints is how many users' ids Handler.owners keeps (least recently
// used evicted): about 100 bytes each.
const ownerHints = 10000

// NewHandler returns a handler that answers chat requests with agent and
// keeps users, threads and histories in st. When agent is a [DataAgent],
// the data query API runs queries with its data sources; otherwise that
// API answers 404 for every agent.
//
// Its options are the functions of this package returning [Option] or
// [SharedOption]; an invalid option value panics when its With function is
// called.
func NewHandler(st store.Store, agent Agent, opts ...Option) *Handler {
	cfg := newConfig(opts)
	tel := telemetry.New(scope, cfg.tp, cfg.mp)
	data, _ := agent.(DataAgent)
	return &Handler{st: st, agent: instrumented{agent, tel}, cfg: cfg, turns: newRegistry(cfg.log, cfg.cluster), persist: &persister{st: st}, tel: tel,
		owners: lru.New[ownerKey, int64](ownerHints), data: data}
}

// Routes returns the chat endpoints (stream-chat-state, abort) and the
// data query API with authentication applied (middleware.APIKeyOrToken:
// Authorization: Api-Key <key>, or Bearer <token> of an embed session).
func (h *Handler) Routes() []Route {
	mo := []middleware.APIKeyOrTokenOption{middleware.WithClock(h.cfg.now), middleware.WithKeyCache(h.cfg.keyCacheTTL)}
	if h.cfg.log != nil {
		mo = append(mo, middleware.WithLogger(h.cfg.log))
	}
	auth := middleware.APIKeyOrToken(h.st, mo...)
	return []Route{
		{Method: http.MethodPost, Pattern: StreamPattern, Handler: h.tel.Route(http.MethodPost, StreamPattern, auth(http.HandlerFunc(h.serveStream)))},
		{Method: http.MethodPost, Pattern: AbortPattern, Handler: h.tel.Route(http.MethodPost, AbortPattern, auth(http.HandlerFunc(h.serveAbort)))},
		{Method: http.MethodPost, Pattern: DataPattern, Handler: h.tel.Route(http.MethodPost, DataPattern, auth(http.HandlerFunc(h.serveData)))},
	}
}

// Stream returns the stream-chat-state endpoint without authentication: it
// expects middleware.AccountFromContext (and, for tokens,
// middleware.EmbedSessionFromContext) to be set by the host's middleware,
// and answers 401 otherwise. Most hosts mount [Handler.Routes] instead.
func (h *Handler) Stream() http.Handler {
	return h.tel.Route(http.MethodPost, StreamPattern, http.HandlerFunc(h.serveStream))
}

// Abort returns the abort endpoint without authentication; see
// [Handler.Stream].
func (h *Handler) Abort() http.Handler {
	return h.tel.Route(http.MethodPost, AbortPattern, http.HandlerFunc(h.serveAbort))
}

// Data returns the data query API without authentication; see
// [Handler.Stream].
func (h *Handler) Data() http.Handler {
	return h.tel.Route(http.MethodPost, DataPattern, http.HandlerFunc(h.serveData))
}

// Shutdown stops accepting new turns (503) and lets running turns finish
// until ctx ends; it then aborts the remaining ones (their streams end with
// state.aborted and state.error) and waits a few seconds for their agents to
// return. Streams following a turn of another replica end then too, with
// the thread's stored state. It returns nil once every turn goroutine has
// ended and every claim of the [Cluster] ([WithCluster]) is released: close
// the cluster after it.
func (h *Handler) Shutdown(ctx context.Context) error {
	return h.turns.shutdown(ctx, shutdownGrace)
}

// RunningTurns returns how many turns this handler runs now (reserved or
// streaming), not counting those of other replicas of a [Cluster]; a server
// can say what its shutdown waits for.
func (h *Handler) RunningTurns() int { return h.turns.count() }

// Close aborts every running turn at once and waits for them to end.
func (h *Handler) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return h.Shutdown(ctx)
}

// caller is the authorized context of a chat request.
type caller struct {
	acct  store.Account
	agent store.Agent
	es    *middleware.EmbedSession
}

var (
	errNoCredentials = wire.Errorf(http.StatusUnauthorized, "missing credentials: send Authorization: Api-Key <key> or Authorization: Bearer <token>")
	errWrongAccount  = wire.Errorf(http.StatusUnauthorized, "the credentials are not valid for this account")
	errNoChatPlan    = wire.Errorf(http.StatusForbidden, "the chat API is available on the premium and enterprise plans only")
	errAccountGone   = wire.Errorf(http.StatusNotFound, "account not found")
	errAgentGone     = wire.Errorf(http.StatusNotFound, "agent not found")
	errChatGone      = wire.Errorf(http.StatusNotFound, "chat not found")
	errOtherUser     = wire.Errorf(http.StatusForbidden, "sessionSettings must name the session token's user")
	errDeployment    = wire.Errorf(http.StatusForbidden, "the session does not grant access to this agent's deployment")
)

// authorize checks the account of the path against the credentials, the
// plan and the agent.
func (h *Handler) authorize(r *http.Request) (caller, error) {
	ctx := r.Context()
	acct, _, ok := middleware.AccountFromContext(ctx)
	if !ok {
		return caller{}, errNoCredentials
	}
	if name := r.PathValue("accountName"); acct.Name != name {
		if !wire.ValidText(name) {
			return caller{}, errAccountGone
		}
		if _, err := h.st.AccountByName(ctx, name); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return caller{}, errAccountGone
			}
			return caller{}, err
		}
		return caller{}, errWrongAccount
	}
	if !acct.Plan.HasChat() {
		return caller{}, errNoChatPlan
	}
	agentID := r.PathValue("agentId")
	if !wire.ValidText(agentID) {
		return caller{}, errAgentGone
	}
	ag, err := h.st.Agent(ctx, acct.ID, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return caller{}, errAgentGone
	}
	if err != nil {
		return caller{}, err
	}
	c := caller{acct: acct, agent: ag}
	if es, ok := middleware.EmbedSessionFromContext(ctx); ok {
		if es.Session.DeploymentID != 0 && ag.DeploymentID != 0 && es.Session.DeploymentID != ag.DeploymentID {
			return caller{}, errDeployment
		}
		c.es = &es
	}
	return c, nil
}

// checkTokenUser enforces that sessionSettings, when sent with a token,
// names the token's user.
func checkTokenUser(es *middleware.EmbedSession, s *SessionSettings) error {
	if es == nil || s == nil {
		return nil
	}
	u := es.User
	if (s.ExternalID != "" && s.ExternalID == u.ExternalID) || (s.InternalID != "" && s.InternalID == u.InternalID) {
		return nil
	}
	return errOtherUser
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(w, r, h.cfg.log, err)
}

// admit authorizes a request and decodes its body with decode; a token's
// caller may omit sessionSettings, and settings it sends must name the
// token's user.
func admit[T any](h *Handler, w http.ResponseWriter, r *http.Request, decode func([]byte, bool) (T, error), settings func(T) *SessionSettings) (caller, T, error) {
	var zero T
	c, err := h.authorize(r)
	if err != nil {
		return c, zero, err
	}
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return c, zero, err
	}
	req, err := decode(body, c.es == nil)
	if err != nil {
		return c, zero, err
	}
	return c, req, checkTokenUser(c.es, settings(req))
}

func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request) {
	c, req, err := admit(h, w, r, decodeChatRequest, func(q chatRequest) *SessionSettings { return q.SessionSettings })
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if req.Input == "" {
		h.serveState(w, r, c, req)
		return
	}
	h.serveTurn(w, r, c, req)
}

// lookupUser finds the user named by the request without provisioning it;
// ok is false when it does not exist (or has expired).
func (h *Handler) lookupUser(ctx context.Context, c caller, s *SessionSettings) (store.User, bool, error) {
	if c.es != nil {
		return c.es.User, true, nil
	}
	var (
		u   store.User
		err error
	)
	if s.ExternalID != "" {
		u, err = h.st.UserByExternalID(ctx, c.acct.ID, s.ExternalID, h.cfg.now())
	} else {
		u, err = h.st.InternalUser(ctx, c.acct.ID, s.InternalID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.User{}, false, nil
	}
	return u, err == nil, err
}

// threadOf returns the thread chatID after checking that it belongs to the
// caller's agent (else 404), to a visible user (else 404) and to the user
// named by the request (else 403). The thread is read before the user, so that a thread created
// together with its user is never seen without it.
func (h *Handler) threadOf(ctx context.Context, c caller, chatID string, s *SessionSettings) (store.Thread, error) {
	th, err := h.st.Thread(ctx, c.acct.ID, chatID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Thread{}, errChatGone
	}
	if err != nil {
		return store.Thread{}, err
	}
	if th.AgentID != c.agent.ID {
		return store.Thread{}, errChatGone
	}
	user, known, err := h.lookupUser(ctx, c, s)
	if err != nil {
		return store.Thread{}, err
	}
	if !known || th.UserID != user.ID {
		// The thread of an expired ephemeral user is as invisible as its
		// owner (docs/decisions.md §5) until the reaper deletes both: 404.
		gone, err := ownerGone(ctx, h.st, th, h.cfg.now())
		if err != nil {
			return store.Thread{}, err
		}
		if gone {
			return store.Thread{}, errChatGone
		}
		return store.Thread{}, errNotOwner
	}
	return th, nil
}

// ownerGone reports whether the owner of th is no longer visible at now:
// an expired ephemeral user that the reaper has not deleted yet.
func ownerGone(ctx context.Context, users interface {
	UserByID(context.Context, int64, time.Time) (store.User, error)
}, th store.Thread, now time.Time) (bool, error) {
	_, err := users.UserByID(ctx, th.UserID, now)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	return false, err
}

// serveState answers a request without input: the thread's state, or the
// running turn rejoined.
func (h *Handler) serveState(w http.ResponseWriter, r *http.Request, c caller, req chatRequest) {
	ctx := r.Context()
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
	th, err := h.threadOf(ctx, c, req.ChatID, req.SessionSettings)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	after := int64(0)
	if req.ResumeAfterSort != nil {
		after = *req.ResumeAfterSort
	}
	if t, ok := h.turns.running(turnKey{c.acct.ID, th.ChatID}); ok {
		lw.write(encodeLine(ptr(cutoffMessage(th.ChatID, true))))
		t.follow(ctx, lw, after)
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

// serveTurn answers a request with input: it reserves the thread for the
// caller's user (in this process and in the cluster) and opens the turn in
// one transaction (provisioning, thread, user echo), then starts the turn
// and streams it. The reservation has effects outside the transaction,
// whose function may run more than once, so it is never made inside it:
// see reserveAndOpen for the order.
func (h *Handler) serveTurn(w http.ResponseWriter, r *http.Request, c caller, req chatRequest) {
	ctx := r.Context()
	now := h.cfg.now()
	chatID := req.ChatID
	if chatID == "" {
		chatID = newID()
	}
	lim := h.cfg.limitsOf(c.acct)
	var (
		t   *turn
		op  openedTurn
		err error
	)
	for attempt := 0; ; attempt++ {
		t, op, err = h.reserveAndOpen(ctx, c, req, chatID, lim, now)
		if !errors.Is(err, errOwnerChanged) || attempt == 2 {
			break
		}
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if c.es == nil {
		h.owners.Add(ownerKeyOf(op.user), op.user.ID, time.Time{}) // see turnOwner
	}
	t.maxSize = op.maxSize // before the turn starts: nothing reads it yet
	h.runTurn(w, r, c, t, op)
}

// errOwnerChanged reports that the user a request provisions is not the one
// its reservation was made for (it was replaced meanwhile): serveTurn
// reserves again.
var errOwnerChanged = fmt.Errorf("chatstream: the chat's user changed while the turn was reserved: %w", store.ErrUnavailable)

// reserveAndOpen reserves the turn and opens it. The reservation needs the
// user's id, so the order depends on whether the user exists:
//
//   - An existing user (or the session's): reserve, then open; a failed
//     opening releases the reservation.
//   - A new user in a new chat (no chatId sent): open first, in one
//     transaction that creates the user, then reserve for the new id (see
//     openFirstTurn). This is the common first turn, and it commits once.
//   - A new user naming a chat: the chat may exist, so the user is created
//     in a transaction of its own, then reserved for, then the turn opened.
func (h *Handler) reserveAndOpen(ctx context.Context, c caller, req chatRequest, chatID string, lim store.Limits, now time.Time) (*turn, openedTurn, error) {
	owner, err := h.turnOwner(ctx, c, req, now)
	if err != nil {
		return nil, openedTurn{}, err
	}
	if owner == 0 && req.ChatID == "" {
		return h.openFirstTurn(ctx, c, req, chatID, lim, now)
	}
	var created store.User
	if owner == 0 {
		if created, err = h.createOwner(ctx, c, req, chatID, lim, now); err != nil {
			return nil, openedTurn{}, err
		}
		owner = created.ID
	}
	t, err := h.reserve(ctx, c, chatID, owner, lim)
	var op openedTurn
	if err == nil {
		if op, err = h.openTurn(ctx, c, req, chatID, owner, lim, now); err != nil {
			h.turns.release(ctx, t)
		}
	}
	if errors.Is(err, errOwnerChanged) && c.es == nil {
		h.owners.Remove(requestOwner(c, req)) // read it again
	}
	if err != nil && created.ID != 0 {
		// A refused request changes nothing: the user it created for the
		// reservation goes again, unless a concurrent request of the same
		// user uses it by now (that one's opening then finds it and goes
		// on, or provisions it anew and reserves again: errOwnerChanged).
		h.undo(ctx, c.acct.ID, "", created, now)
	}
	return t, op, err
}

// reserve reserves the thread chatID for a turn of user owner, within the
// account's turn limits.
func (h *Handler) reserve(ctx context.Context, c caller, chatID string, owner int64, lim store.Limits) (*turn, error) {
	return h.turns.reserve(ctx, turnKey{c.acct.ID, chatID}, owner, h.cfg.maxTurnBytes,
		TurnLimits{Account: max(lim.RunningTurns, 0), User: max(lim.RunningTurnsPerUser, 0)})
}

// openFirstTurn opens the first turn of a user the request creates, in a
// chat id just made: one transaction stores the user, the thread and the
// echo, and the turn is reserved after the commit, for the user's new id.
// Nobody else can reserve the thread meanwhile: its id is new and not sent
// yet. A refused reservation (a turn limit, a shutdown, the cluster) undoes
// the opening: the thread goes, and so does the user if this request
// created it and nothing else uses it by then (a concurrent first request
// of the same user may have given it a turn).
func (h *Handler) openFirstTurn(ctx context.Context, c caller, req chatRequest, chatID string, lim store.Limits, now time.Time) (*turn, openedTurn, error) {
	if h.turns.isClosing() {
		return nil, openedTurn{}, errShuttingDown // spare the store an opening to undo
	}
	op, err := h.openTurn(ctx, c, req, chatID, 0, lim, now)
	if err != nil {
		return nil, openedTurn{}, err
	}
	t, err := h.reserve(ctx, c, chatID, op.user.ID, lim)
	if err != nil {
		h.undo(ctx, c.acct.ID, chatID, op.user, now)
		return nil, openedTurn{}, err
	}
	return t, op, nil
}

// undo deletes what a refused request stored: the thread chatID, if not
// empty, and the user u if the request created it (at now) and nothing else
// uses it by then. It runs past the request's cancellation; a failure is
// logged, as the request has its own error to answer.
func (h *Handler) undo(ctx context.Context, accountID int64, chatID string, u store.User, now time.Time) {
	ctx = context.WithoutCancel(ctx)
	deleted := false
	err := h.st.InTx(ctx, func(tx store.Tx) error {
		deleted = false
		if chatID != "" {
			if err := tx.DeleteThread(ctx, accountID, chatID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		if !u.CreatedAt.Equal(now) {
			return nil // it existed before: a concurrent request created it
		}
		var err error
		deleted, err = tx.DeleteUnusedUser(ctx, u.ID, u.CreatedAt)
		return err
	})
	if err == nil && deleted {
		h.owners.Remove(ownerKeyOf(u)) // a hint to it would only cost a retry
	}
	if err != nil {
		h.cfg.log.LogAttrs(ctx, slog.LevelWarn, "what a refused chat turn stored was not deleted", slog.String("error", err.Error()))
	}
}

// turnOwner returns the id of the user a turn request runs for, without
// changing anything: the session's user, or the existing user the request
// names; 0 when the request would create it. A returning user's id comes
// from h.owners, without a read: it is a hint, as the user may have been
// deleted or replaced since. The opening transaction, which provisions the
// user, refuses a user that is not the hinted one (errOwnerChanged, rolled
// back); reserveAndOpen then forgets the hint and serveTurn tries again with
// a read.
func (h *Handler) turnOwner(ctx context.Context, c caller, req chatRequest, now time.Time) (int64, error) {
	if c.es != nil {
		return c.es.User.ID, nil
	}
	ss := req.SessionSettings
	key := requestOwner(c, req)
	if id, ok := h.owners.Get(key, time.Time{}); ok {
		return id, nil
	}
	var (
		u   store.User
		err error
	)
	if ss.ExternalID != "" {
		u, err = h.st.UserByExternalID(ctx, c.acct.ID, ss.ExternalID, now)
	} else {
		u, err = h.st.InternalUser(ctx, c.acct.ID, ss.InternalID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err == nil {
		h.owners.Add(key, u.ID, time.Time{})
	}
	return u.ID, err
}

// ownerKey names a user as a turn request does: by account and external
// or internal id (one of the two is empty).
type ownerKey struct {
	accountID              int64
	externalID, internalID string
}

func ownerKeyOf(u store.User) ownerKey { return ownerKey{u.AccountID, u.ExternalID, u.InternalID} }

// requestOwner is the ownerKey of the user an API-key request names.
func requestOwner(c caller, req chatRequest) ownerKey {
	return ownerKey{c.acct.ID, req.SessionSettings.ExternalID, req.SessionSettings.InternalID}
}

// createOwner creates the user of a turn request in a chat it names, in a
// transaction of its own, so that the thread can be reserved for it. Before
// that, a chat that exists and cannot be this user's is refused, so that a
// refused request leaves nothing behind.
func (h *Handler) createOwner(ctx context.Context, c caller, req chatRequest, chatID string, lim store.Limits, now time.Time) (store.User, error) {
	if err := h.checkNewOwner(ctx, c, chatID, now); err != nil {
		return store.User{}, err
	}
	var u store.User
	err := h.st.InTx(ctx, func(tx store.Tx) error {
		p := req.SessionSettings.provision(now, h.cfg.ephemeralTTL)
		p.MaxNewEphemeralPerMinute = lim.NewEphemeralUsersPerMinute
		p.LikelyNew = true // turnOwner found none
		res, err := provision.Apply(ctx, tx, c.acct, p, c.acct.ExternalUserLimit(), now)
		u = res.User
		return err
	})
	return u, err
}

// checkNewOwner refuses a turn of a user who does not exist yet in chat
// chatID when the chat exists and its owner is visible: the chat cannot be
// this user's.
func (h *Handler) checkNewOwner(ctx context.Context, c caller, chatID string, now time.Time) error {
	th, err := h.st.Thread(ctx, c.acct.ID, chatID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	gone, err := ownerGone(ctx, h.st, th, now)
	switch {
	case err != nil:
		return err
	case gone:
		return nil
	case th.AgentID != c.agent.ID:
		return errChatGone
	default:
		return errNotOwner
	}
}

// openedTurn is what openTurn committed and the turn needs.
type openedTurn struct {
	chatID string
	seq    *sequence
	echo   Message
	info   Turn
	user   store.User
	scope  store.Scope
	// maxSize caps the turn's stream: what is left of the thread's byte
	// budget (see threadRoom).
	maxSize int
}

// openTurn provisions the user (the request's profile, attributes and
// groups), finds or creates the thread and stores the user echo, in one
// transaction with no effect outside it. The user must be owner, for whom
// the thread is reserved; owner 0 takes the user the request provisions,
// for a thread reserved after the commit (turnOwner found none: provisioning
// tries creating it first).
func (h *Handler) openTurn(ctx context.Context, c caller, req chatRequest, chatID string, owner int64, lim store.Limits, now time.Time) (openedTurn, error) {
	var op openedTurn
	err := h.st.InTx(ctx, func(tx store.Tx) error {
		var (
			user  store.User
			scope store.Scope
		)
		if c.es != nil {
			user = c.es.User
			scope = c.es.Session.Scope()
		} else {
			p := req.SessionSettings.provision(now, h.cfg.ephemeralTTL)
			p.MaxNewEphemeralPerMinute = lim.NewEphemeralUsersPerMinute
			p.LikelyNew = owner == 0 // turnOwner found none
			res, err := provision.Apply(ctx, tx, c.acct, p, c.acct.ExternalUserLimit(), now)
			if err != nil {
				return err
			}
			user, scope = res.User, res.Scope
		}
		if owner != 0 && user.ID != owner {
			return errOwnerChanged
		}
		// A chat id the request did not send is new (a random UUID): no
		// need to look for its thread.
		th, err := store.Thread{}, error(store.ErrNotFound)
		if req.ChatID != "" {
			th, err = tx.Thread(ctx, c.acct.ID, chatID)
		}
		if err == nil && th.UserID != user.ID {
			// The thread of an expired ephemeral user is as invisible as
			// its owner: the id is free. Do the reaper's work now.
			gone, gerr := ownerGone(ctx, tx, th, now)
			if gerr != nil {
				return gerr
			}
			if gone {
				if err := tx.DeleteUser(ctx, th.UserID); err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				err = store.ErrNotFound
			}
		}
		var (
			history []Message
			maxSize int
		)
		isNew := errors.Is(err, store.ErrNotFound)
		switch {
		case isNew:
			maxSize, _ = threadRoom(nil, nil, lim, h.cfg.maxTurnBytes) // an empty thread has room
			th = store.Thread{AccountID: c.acct.ID, ChatID: chatID, AgentID: c.agent.ID, UserID: user.ID, CreatedAt: now, UpdatedAt: now}
		case err != nil:
			return err
		case th.AgentID != c.agent.ID:
			return errChatGone
		case th.UserID != user.ID:
			return errNotOwner
		default:
			msgs, err := tx.Messages(ctx, c.acct.ID, chatID)
			if err != nil {
				return err
			}
			var last int64
			history, last = decodeHistory(msgs)
			if maxSize, err = threadRoom(msgs, history, lim, h.cfg.maxTurnBytes); err != nil {
				return err
			}
			th.LastSort = max(th.LastSort, last)
		}
		seq := newSequence(chatID, h.cfg.dev, th.LastSort, history)
		echo := seq.echo(newID(), req.Input)
		stored, err := toStored([]Message{echo})
		if err != nil {
			return err
		}
		// The echo reserves the turn's first block of sorts; a new thread
		// is stored with it.
		if isNew {
			th.LastSort = echo.Sort + sortBlock
			if err := tx.CreateThread(ctx, th, stored...); err != nil {
				if errors.Is(err, store.ErrConflict) {
					return errTurnRunning
				}
				return err
			}
		} else if err := tx.AppendMessages(ctx, c.acct.ID, chatID, echo.Sort+sortBlock, stored); err != nil {
			return err
		}
		op = openedTurn{chatID: chatID, seq: seq, echo: echo, user: user, scope: scope, maxSize: maxSize, info: Turn{
			AccountName:      c.acct.Name,
			AgentID:          c.agent.ID,
			ChatID:           chatID,
			Input:            req.Input,
			History:          history,
			ActiveBranchName: req.ActiveBranchName,
			IsDefaultBranch:  req.branchDefault,
			Branches:         c.acct.Branches,
			DeploymentID:     c.agent.DeploymentID,
		}}
		return nil
	})
	return op, err
}

// runTurn starts the turn opened by openTurn on its reservation t and
// streams it.
func (h *Handler) runTurn(w http.ResponseWriter, r *http.Request, c caller, t *turn, op openedTurn) {
	ctx := r.Context()
	chatID, seq, echo, info := op.chatID, op.seq, op.echo, op.info
	turnUserRow, turnScope := op.user, op.scope

	// Past the commit nothing can fail with an HTTP status: answer at once.
	lw := h.newLineWriter(r, w)
	defer lw.end()
	lw.send(cutoffMessage(chatID, false))

	// The user's attributes and groups are read after the commit, off the
	// write path. The turn cannot run without them (they drive row-level
	// security): if they cannot be read, it ends as an agent error.
	agent := h.agent
	rctx := context.WithoutCancel(ctx) // the turn is the server's now
	attrs, err := h.st.AttributeValues(rctx, turnUserRow.ID, turnScope)
	var groups []store.Group
	if err == nil {
		groups, err = h.st.Memberships(rctx, turnUserRow.ID, turnScope)
	}
	if err != nil {
		readErr := err
		agent = instrumented{AgentFunc(func(context.Context, Turn, Emitter) error {
			return fmt.Errorf("chatstream: read the user's attributes and groups: %w", readErr)
		}), h.tel} // traced and measured like any turn
	}
	info.User = turnUser(turnUserRow, attrs, groups)

	t.seq = seq
	t.prepareCheckpoints(echo.Sort + sortBlock)
	acctID := c.acct.ID
	t.persist = func(ctx context.Context, lastSort int64, msgs []Message) error {
		stored, err := toStored(msgs)
		if err != nil {
			return err
		}
		return h.persist.persist(ctx, acctID, chatID, lastSort, stored)
	}
	start := seq.start(newID())
	t.begin(ctx, h.cfg.turnTimeout, agent, info, echo, start)

	if !t.follow(ctx, lw, 0) && h.cfg.cancelOnDisconnect && ctx.Err() != nil {
		t.stop(errDisconnected, outcomeAborted)
	}
}

func (h *Handler) serveAbort(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c, req, err := admit(h, w, r, decodeAbortRequest, func(q AbortRequest) *SessionSettings { return q.SessionSettings })
	if err != nil {
		h.fail(w, r, err)
		return
	}
	th, err := h.threadOf(ctx, c, req.ChatID, req.SessionSettings)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if t, ok := h.turns.running(turnKey{c.acct.ID, th.ChatID}); ok {
		t.stop(errAborted, outcomeAborted)
	} else if cl := h.cfg.cluster; cl != nil {
		// The turn may run on another replica: it stops there shortly
		// after (or nothing changes when none runs).
		actx, cancel := context.WithTimeout(ctx, clusterTimeout)
		_, err := cl.Abort(actx, ThreadKey{AccountID: c.acct.ID, ChatID: th.ChatID})
		cancel()
		if err != nil {
			h.fail(w, r, clusterUnavailable(err))
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// decodeHistory decodes stored messages; it returns them with the highest
// sort among them.
func decodeHistory(msgs []store.ThreadMessage) ([]Message, int64) {
	out := make([]Message, 0, len(msgs))
	var last int64
	for _, tm := range msgs {
		var m Message
		if err := json.Unmarshal(tm.Body, &m); err != nil {
			continue // not ours; skip rather than fail the thread
		}
		m.Sort = tm.Sort
		out = append(out, m)
		last = max(last, tm.Sort)
	}
	return out, last
}

func toStored(msgs []Message) ([]store.ThreadMessage, error) {
	out := make([]store.ThreadMessage, len(msgs))
	for i := range msgs {
		b, err := marshalNoEscape(&msgs[i])
		if err != nil {
			return nil, err
		}
		out[i] = store.ThreadMessage{ID: msgs[i].ID, Sort: msgs[i].Sort, Body: b}
	}
	return out, nil
}

// turnUser builds the agent's view of the user.
func turnUser(u store.User, attrs []store.UserAttribute, groups []store.Group) User {
	tu := User{ExternalID: u.ExternalID, InternalID: u.InternalID, Email: u.Email, SecurityContext: u.SecurityContext}
	if len(attrs) > 0 {
		tu.Attributes = make(map[string]any, len(attrs))
		for _, a := range attrs {
			if v, ok := attrValue(a); ok {
				tu.Attributes[a.Name] = v
			}
		}
	}
	for _, g := range groups {
		tu.Groups = append(tu.Groups, g.Name)
	}
	return tu
}

func attrValue(a store.UserAttribute) (any, bool) {
	var err error
	switch a.Type {
	case store.TypeString:
		var v string
		err = json.Unmarshal(a.Value, &v)
		return v, err == nil
	case store.TypeNumber:
		var v float64
		err = json.Unmarshal(a.Value, &v)
		return v, err == nil
	case store.TypeStringArray:
		var v []string
		err = json.Unmarshal(a.Value, &v)
		return v, err == nil
	case store.TypeNumberArray:
		var v []float64
		err = json.Unmarshal(a.Value, &v)
		return v, err == nil
	}
	var v any
	err = json.Unmarshal(a.Value, &v)
	return v, err == nil
}

// newID returns a random UUID (version 4) for chats and messages.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
