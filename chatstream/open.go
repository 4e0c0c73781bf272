package chatstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/store"
)

// Opening a turn: provision the user, reserve the thread, store the user
// echo, then start the agent and stream the turn (serveTurn, top to bottom).

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
	var (
		t   *turn
		op  openedTurn
		err error
	)
	// The opening runs on a goroutine that ends with it: store calls grow
	// a goroutine's stack far beyond what streaming needs, and the
	// request's goroutine keeps its stack as long as the stream is open.
	onOwnStack(func() { t, op, err = h.open(ctx, c, req, chatID, now) })
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.runTurn(w, r, c, t, op)
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

// open reserves and opens the turn, then reads what the agent needs to
// know about the user.
func (h *Handler) open(ctx context.Context, c caller, req chatRequest, chatID string, now time.Time) (*turn, openedTurn, error) {
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
		return nil, op, err
	}
	if c.es == nil {
		h.owners.Add(ownerKeyOf(op.user), op.user.ID, time.Time{}) // see turnOwner
	}
	t.maxSize = op.maxSize // before the turn starts: nothing reads it yet

	// Past the commit nothing can fail with an HTTP status. The user's
	// attributes and groups are read after the commit, off the write
	// path. The turn cannot run without them (they drive row-level
	// security): if they cannot be read, it ends as an agent error.
	op.agent = h.agent
	rctx := context.WithoutCancel(ctx) // the turn is the server's now
	attrs, err := h.st.AttributeValues(rctx, op.user.ID, op.scope)
	var groups []store.Group
	if err == nil {
		groups, err = h.st.Memberships(rctx, op.user.ID, op.scope)
	}
	if err != nil {
		readErr := err
		op.agent = instrumented{AgentFunc(func(context.Context, Turn, Emitter) error {
			return fmt.Errorf("chatstream: read the user's attributes and groups: %w", readErr)
		}), h.tel} // traced and measured like any turn
	}
	op.info.User = turnUser(op.user, attrs, groups)
	return t, op, nil
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
	// agent answers the turn (set by open).
	agent Agent
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
	chatID, seq, echo := op.chatID, op.seq, op.echo

	lw := h.newLineWriter(r, w)
	defer lw.end()
	lw.send(cutoffMessage(chatID, false))

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
	t.begin(ctx, h.cfg.turnTimeout, op.agent, op.info, echo, start)

	if !t.follow(ctx, lw, 0) && h.cfg.cancelOnDisconnect && ctx.Err() != nil {
		t.stop(errDisconnected, outcomeAborted)
	}
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
