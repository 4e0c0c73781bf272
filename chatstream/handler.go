package chatstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/embedkit/embedkit/internal/lru"
	"github.com/embedkit/embedkit/internal/nilarg"
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
// use middleware.EncodedPathValues(mux.Vars) with UseEncodedPath, on a
// router of embedkit's own: see the package documentation).
type Route struct {
	Method  string
	Pattern string
	Handler http.Handler
}

// Handler serves the chat API, stream-chat-state and abort, and the data
// query API (POST .../agents/{agentId}/sql); [Handler.Routes] returns the
// three. It owns a registry of running turns; call [Handler.Shutdown] (or
// [Handler.Close]) when the server stops. A Handler is safe for concurrent
// use.
type Handler struct {
	st    store.Store
	agent instrumented
	cfg   config
	turns *registry
	tel   *telemetry.Telemetry
	// data is the agent when it is a DataAgent, for the data query API.
	data DataAgent
	// Caches of WithKeyCache (nil without): agents, and the definitions
	// that sessionSettings name.
	agents *lru.Cache[agentKey, store.Agent]
	defs   *provision.DefinitionCache
	// userReads holds a slot for each turn reading its user (see userReader).
	userReads chan struct{}
	// queries counts the data queries running in this process.
	queries dataQueries
}

type agentKey struct {
	accountID int64
	id        string
}

// NewHandler returns a handler that answers chat requests with agent and
// keeps users, threads and histories in st. When agent is a [DataAgent],
// the data query API runs queries with its data sources; otherwise that
// API answers 404 for every agent.
//
// Its options are the functions of this package returning [Option] or
// [SharedOption]; an invalid option value panics when its With function is
// called. A nil st or agent (or a nil pointer or func in it, as an ignored
// Open error leaves) panics here, rather than failing every request or
// turn.
func NewHandler(st store.Store, agent Agent, opts ...Option) *Handler {
	nilarg.Check("chatstream: NewHandler", "store", st)
	nilarg.Check("chatstream: NewHandler", "agent", agent)
	cfg := newConfig(opts)
	tel := telemetry.New(scope, cfg.tp, cfg.mp)
	data, _ := agent.(DataAgent)
	h := &Handler{st: st, agent: instrumented{agent, tel}, cfg: cfg, turns: newRegistry(cfg.log, cfg.cluster, st), tel: tel, data: data, userReads: make(chan struct{}, maxUserReads),
		defs: provision.NewDefinitionCache(middleware.DefaultKeyCacheSize, cfg.keyCacheTTL)}
	if cfg.keyCacheTTL > 0 {
		h.agents = lru.New[agentKey, store.Agent](middleware.DefaultKeyCacheSize)
	}
	return h
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
		{Method: http.MethodPost, Pattern: StreamPattern, Handler: h.tel.Route(http.MethodPost, StreamPattern, h.stream(auth))},
		{Method: http.MethodPost, Pattern: AbortPattern, Handler: h.tel.Route(http.MethodPost, AbortPattern, auth(http.HandlerFunc(h.serveAbort)))},
		{Method: http.MethodPost, Pattern: DataPattern, Handler: h.tel.Route(http.MethodPost, DataPattern, auth(http.HandlerFunc(h.serveData)))},
	}
}

// Stream returns the stream-chat-state endpoint without authentication: it
// expects middleware.AccountFromContext (and, for tokens,
// middleware.EmbedSessionFromContext) to be set by the host's middleware,
// and answers 401 otherwise. Most hosts mount [Handler.Routes] instead.
func (h *Handler) Stream() http.Handler {
	return h.tel.Route(http.MethodPost, StreamPattern, h.stream(nil))
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
// the thread's stored state. Streams this handler took over from net/http
// (over HTTP/1.1, see docs/limits.md), which http.Server.Shutdown does not
// wait for, end here: once the turns are stopped, a client that reads
// nothing gets half of the few seconds of grace for its last lines. It
// returns nil once every turn goroutine and every such stream has ended and
// every claim of the [Cluster] ([WithCluster]) is released: close the
// cluster after it.
func (h *Handler) Shutdown(ctx context.Context) error {
	return h.turns.shutdown(ctx, shutdownGrace)
}

// RunningTurns returns how many turns this handler runs now (reserved or
// streaming), not counting those of other replicas of a [Cluster] nor the
// streams of turns that ended and still write their last lines; a server
// can say what its shutdown waits for.
func (h *Handler) RunningTurns() int { return h.turns.count() }

// Close aborts every running turn at once and waits for them and their
// detached streams to end (see [Handler.Shutdown]).
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
	ag, err := h.readAgent(ctx, acct.ID, agentID)
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

// readAgent reads an agent, through the cache of WithKeyCache.
func (h *Handler) readAgent(ctx context.Context, accountID int64, id string) (store.Agent, error) {
	if h.agents == nil {
		return h.st.Agent(ctx, accountID, id)
	}
	k := agentKey{accountID, id}
	if ag, ok := h.agents.Get(k, time.Now()); ok {
		return ag, nil
	}
	ag, err := h.st.Agent(ctx, accountID, id)
	if err == nil {
		h.agents.Add(k, ag, time.Now().Add(h.cfg.keyCacheTTL))
	}
	return ag, err
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

// stream returns the stream-chat-state endpoint behind auth (nil: the host
// authenticates).
func (h *Handler) stream(auth func(http.Handler) http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serveStream(w, r, auth) })
}

// serveStream serves stream-chat-state. The authentication, the admission,
// the turn's opening and its start run on a goroutine that ends with them:
// store calls grow a goroutine's stack far beyond what streaming needs, and
// the runtime shrinks the stack of a parked goroutine only to four times
// what its frames use. The request's goroutine, which waits for the
// stream's lines as long as the turn runs, then holds only the frames of
// the router above and of the stream's rest below.
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request, auth func(http.Handler) http.Handler) {
	var rest func()
	onOwnStack(func() { rest = h.admitStream(w, r, auth) })
	if rest != nil {
		rest()
	}
}

// admitStream authenticates the request with auth (unless nil), admits it
// and, for an input, opens and starts its turn. It returns what the
// request's goroutine does next (following the turn, or the thread's
// state), or nil once the answer is complete (an error).
func (h *Handler) admitStream(w http.ResponseWriter, r *http.Request, auth func(http.Handler) http.Handler) (rest func()) {
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, req, err := admit(h, w, r, decodeChatRequest, func(q chatRequest) *SessionSettings { return q.SessionSettings })
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if req.Input == "" {
			rest = func() { h.serveState(w, r, c, req) }
			return
		}
		t, op, err := h.open(r.Context(), c, req, h.cfg.now())
		if err != nil {
			h.fail(w, r, err)
			return
		}
		rest = h.startTurn(w, r, t, op)
	})
	if auth == nil {
		serve(w, r)
	} else {
		auth(serve).ServeHTTP(w, r)
	}
	return rest
}

// onOwnStack runs f on a new goroutine and waits for it; a panic of f
// panics the caller.
func onOwnStack(f func()) {
	done := make(chan struct{})
	var p any
	go func() {
		defer func() {
			p = recover()
			close(done)
		}()
		f()
	}()
	<-done
	if p != nil {
		panic(p)
	}
}

// lookupUser finds the user named by the request without provisioning it;
// ok is false when it does not exist (or has expired).
func (h *Handler) lookupUser(ctx context.Context, c caller, s *SessionSettings) (store.User, bool, error) {
	if c.es != nil {
		return c.es.User, true, nil
	}
	u, err := h.st.UserByKey(ctx, store.UserKey{AccountID: c.acct.ID, ExternalID: s.ExternalID, InternalID: s.InternalID}, h.cfg.now())
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
