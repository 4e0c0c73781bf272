package chatstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// Opening a turn, top to bottom (open, then startTurn): find the user
// (the session's, or the stored one of sessionSettings, unchanged),
// reserve the turn for the user's id (in this process and in the
// cluster), read the attributes and groups of a returning user whose
// request may send only values it holds, open the stream (the user's new
// values unless it holds them, the thread and the user echo, in one
// transaction), then start the agent and stream the turn. A user that
// does not exist yet is created in the opening's transaction, and its
// turn reserved there once its id is known. A request is all or nothing:
// a refused reservation or opening rolls back everything it wrote, a new
// user included.

// open finds the user, reserves the turn for it and opens the stream. The
// reservation has effects outside the store (the registry, the cluster):
// it is made before the opening's transaction, or, for a user that
// transaction creates, in it (given to the new id in place if the
// transaction runs again under another one), and released when the
// opening fails.
func (h *Handler) open(ctx context.Context, c caller, req chatRequest, now time.Time) (*turn, openedTurn, error) {
	chatID := req.ChatID
	if chatID == "" {
		chatID = newID()
	}
	if h.turns.isClosing() {
		return nil, openedTurn{}, errShuttingDown // spare the store the user's reads
	}
	lim := h.cfg.limitsOf(c.acct)
	u, err := h.findUser(ctx, c, req, lim, now)
	if err != nil {
		return nil, openedTurn{}, err
	}
	var t *turn
	// reserve reserves the turn for userID; rd reads the thread when the
	// cluster refuses (the opening's transaction, when it runs in one: a
	// read beside it would need a second connection while it holds locks).
	tl := TurnLimits{Account: max(lim.RunningTurns, 0), User: max(lim.RunningTurnsPerUser, 0)}
	reserve := func(rd store.Tx, userID int64) (err error) {
		switch {
		case t == nil:
			t, err = h.turns.reserve(ctx, turnKey{c.acct.ID, chatID}, userID, u.externalID, c.agent.ID, h.cfg.maxTurnBytes, tl)
		case t.userID == userID:
			return nil // the opening's transaction runs again
		default: // again, and the new user has another id (PostgreSQL does not roll sequences back)
			if err = h.turns.rebind(ctx, t, userID, tl); err != nil {
				t = nil // dropped
			}
		}
		switch {
		case err == errOthersOpening || err == errOthersOpeningAgent || err == errOwnOpening:
			err = othersOpening(ctx, rd, c, chatID, userID, err)
		case (err == errTurnRunning || err == errNotOwner) && h.turns.cluster != nil:
			err = claimedElsewhere(ctx, rd, c, chatID, userID, err)
		}
		return err
	}
	if u.user.ID != 0 { // a user that exists
		if err = reserve(h.st, u.user.ID); err == nil {
			err = h.readHeldUser(ctx, c, &u)
		}
	}
	var op openedTurn
	if err == nil {
		op, err = h.openStream(ctx, c, req, chatID, &u, lim, now, reserve)
	}
	if err != nil {
		if t != nil {
			h.turns.release(ctx, t)
		}
		return nil, openedTurn{}, err
	}
	t.maxSize = op.maxSize // before the turn starts: nothing reads it yet
	op.user = h.userReader(u.user, u.scope, u.data)
	if u.found != nil {
		h.defs.Add(u.gen, u.found)
	}
	return t, op, nil
}

// claimedElsewhere answers a request whose thread another replica has
// claimed (err: 409 for the user's claim, 403 for another's): 404 if the
// stored thread is another agent's, as when no turn runs (the claim names
// the turn's user, not its agent). Another user's claim on the caller's
// stored thread can only be an opening there that the store is about to
// refuse (a turn of the thread runs only for its owner): 409, try again,
// as when it is in this process (othersOpening); and the caller's own
// claim on another user's thread, 403.
func claimedElsewhere(ctx context.Context, rd store.Tx, c caller, chatID string, userID int64, err error) error {
	th, terr := rd.Thread(ctx, c.acct.ID, chatID)
	switch {
	case terr != nil:
	case th.AgentID != c.agent.ID:
		return errChatGone
	case err == errNotOwner && th.UserID == userID:
		return errChatBusy
	case err == errTurnRunning && th.UserID != userID:
		return errNotOwner // the caller's own opening elsewhere, about to be refused
	}
	return err
}

// othersOpening answers a request whose thread is held by an opening that
// has not started (err, the answer were that turn running): another
// user's, the user's own through another agent, or the user's own
// (errOwnOpening). That opening was reserved before the store said whose
// the thread is. When the thread is the caller's, another's opening is
// about to be refused and the answer is 409, try again, rather than 403 as
// if the chat were another's; when it is another's, the caller's own
// opening is about to be refused and the answer is 403 (or 404), rather
// than 409 as if the chat were the caller's.
func othersOpening(ctx context.Context, rd store.Tx, c caller, chatID string, userID int64, err error) error {
	th, terr := rd.Thread(ctx, c.acct.ID, chatID)
	switch {
	case terr == nil && th.AgentID == c.agent.ID && th.UserID == userID:
		if err == errOwnOpening {
			return errTurnRunning
		}
		return errChatBusy
	case terr == nil && th.AgentID != c.agent.ID:
		return errChatGone
	case terr == nil:
		return errNotOwner
	case !errors.Is(terr, store.ErrNotFound):
		return terr
	}
	return err // a new chat that the other opening may create
}

// foundUser is the user a turn runs for, as findUser found it.
type foundUser struct {
	user       store.User
	externalID string // the request's, of sessionSettings
	scope      store.Scope
	// update provisions the request's values in the opening's
	// transaction (nil: nothing to write): on the user that existed, or on
	// a new one (user.ID 0), which it creates.
	update func(tx store.Tx) (provision.Result, error)
	// The definitions the provisioning looked up, for h.defs once stored.
	gen   int64
	found *store.LookupResult
	// data is what the user holds in scope, when readHeldUser read it
	// (nil: the turn reads it).
	data *store.UserData
	// holds, when set, tells whether the request writes nothing new on
	// user given its data (see readHeldUser).
	holds func(store.User, store.UserData) bool
}

// readHeldUser reads the attributes and groups of a returning user that
// may hold every value the request sends (u.holds set); when it does, the
// opening writes nothing for it (u.update nil) and the turn uses what was
// read. It runs under the turn's reservation, so that no other turn of the
// thread comes between the read and the echo: the request is as if applied
// at the read.
func (h *Handler) readHeldUser(ctx context.Context, c caller, u *foundUser) error {
	if u.holds == nil {
		return nil
	}
	scope := store.TenantWide(c.acct.ID)
	data, err := h.st.UserData(ctx, u.user.ID, scope)
	if err == nil && u.holds(u.user, data) {
		u.update, u.scope, u.data = nil, scope, &data
	}
	return err
}

// findUser returns the user a turn runs for: the session's; the stored
// user of the request's sessionSettings, left as it is until the opening
// writes the request's values (update, unless readHeldUser finds them
// held); or, for a user not stored yet, none (user.ID 0): the opening
// creates it with them (update).
func (h *Handler) findUser(ctx context.Context, c caller, req chatRequest, lim store.Limits, now time.Time) (foundUser, error) {
	if c.es != nil {
		if err := h.checkNames(ctx, c, req.SessionSettings, now); err != nil {
			return foundUser{}, err
		}
		return foundUser{user: c.es.User, scope: c.es.Session.Scope()}, nil
	}
	p := req.SessionSettings.provision(now, h.cfg.ephemeralTTL)
	p.MaxNewEphemeralPerMinute = lim.NewEphemeralUsersPerMinute
	p.KnownDefinitions = h.defs.Known(c.acct.ID, p)
	gen := h.defs.Generation()
	run := func(tx store.Tx) (provision.Result, error) {
		return provision.Apply(ctx, tx, c.acct, p, c.acct.ExternalUserLimit(), now)
	}
	if p.ExternalID == "" { // an internal user, which provisioning only reads
		res, err := provision.Run(ctx, h.st, c.acct, p, now)
		return foundUser{user: res.User, scope: res.Scope, gen: gen, found: res.Found}, err
	}
	u, err := h.st.UserByKey(ctx, store.UserKey{AccountID: c.acct.ID, ExternalID: p.ExternalID}, now)
	if err == nil {
		fu := foundUser{user: u, externalID: p.ExternalID, update: run, gen: gen}
		if p.MayHold(u) {
			fu.holds = p.Holds
		}
		return fu, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return foundUser{}, err
	}
	// A new user (or one a concurrent request creates meanwhile, on which
	// the opening then writes the request's values).
	return foundUser{externalID: p.ExternalID, update: run, gen: gen}, nil
}

// checkNames checks the attribute and group names of sessionSettings that
// are validated but not applied (with a session's token, or without
// input) as an opening that applies them would: a name the applicable
// catalog lacks is 400 whatever the caller's credentials.
func (h *Handler) checkNames(ctx context.Context, c caller, s *SessionSettings, now time.Time) error {
	if !s.namesAny() {
		return nil
	}
	scope := store.TenantWide(c.acct.ID)
	if c.es != nil {
		scope = c.es.Session.Scope()
	}
	return provision.CheckNames(ctx, h.st, scope, s.provision(now, h.cfg.ephemeralTTL))
}

// namesAny reports whether s names attributes or groups.
func (s *SessionSettings) namesAny() bool {
	return s != nil && len(s.UserAttributes)+len(s.Groups) > 0
}

// maxUserReads bounds the turns reading their user at once, so that the
// reads, which no first line waits for, leave the store's connections to
// the openings, which every first line waits for (docs/performance.md).
const maxUserReads = 4

// userReader returns how the turn reads the user's attributes and groups
// of scope: on the turn's goroutine, after the first line, off the
// opening's path, at most maxUserReads at once. The turn cannot run
// without them (they drive row-level security): if they cannot be read,
// it ends as an agent error, traced and measured like any turn. When the
// opening read them already (read, not nil), the turn uses those.
func (h *Handler) userReader(u store.User, scope store.Scope, read *store.UserData) userReader {
	return func(ctx context.Context) (User, error) {
		if read != nil {
			return turnUser(u, *read), nil
		}
		var (
			data store.UserData
			err  error
		)
		select {
		case h.userReads <- struct{}{}:
			// On a goroutine of its own, like the opening: the agent's
			// goroutine keeps its stack for the turn's life.
			onOwnStack(func() { data, err = h.st.UserData(ctx, u.ID, scope) })
			<-h.userReads
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		if err != nil {
			return User{}, fmt.Errorf("chatstream: read the user's attributes and groups: %w", err)
		}
		return turnUser(u, data), nil
	}
}

// errUserGone answers a turn whose user was deleted between its
// provisioning and its opening (by an operator, or as an expired
// ephemeral user).
var errUserGone = wire.Errorf(http.StatusServiceUnavailable, "the chat's user was deleted while the turn opened: try again")

// openedTurn is what openStream committed and the turn needs.
type openedTurn struct {
	chatID string
	seq    *sequence
	echo   Message
	info   Turn
	// maxSize caps the turn's stream: what is left of the thread's byte
	// budget (see threadRoom).
	maxSize int
	// user reads the turn's user for the agent (set by open).
	user userReader
	// expires is when the turn's user, an ephemeral one, expires (zero
	// for a persistent user): its turn ends then, as its threads become
	// invisible.
	expires time.Time
}

// openStream writes the request's values (u's update, which sets u's
// scope, and creates a new user), finds or creates the thread chatID of
// the user, reserved for it, and stores the user echo, in one transaction
// (for a new chat of an unchanged user, the one write CreateThread, atomic
// on its own). The turn of a user it creates is reserved in it (reserve),
// once the user's id is known; its only effect outside the store.
func (h *Handler) openStream(ctx context.Context, c caller, req chatRequest, chatID string, u *foundUser, lim store.Limits, now time.Time, reserve func(rd store.Tx, userID int64) error) (openedTurn, error) {
	var op openedTurn
	newUser := u.user.ID == 0
	run := h.st.InTx
	if req.ChatID == "" && u.update == nil {
		// A new chat: its opening is one write (the thread with the echo),
		// atomic without a transaction of its own.
		run = func(_ context.Context, fn func(store.Tx) error) error { return fn(h.st) }
	}
	err := run(ctx, func(tx store.Tx) error {
		if u.update != nil {
			res, err := u.update(tx)
			if err != nil {
				return err
			}
			switch {
			case newUser:
				if err := reserve(tx, res.User.ID); err != nil {
					return err
				}
			case res.User.ID != u.user.ID:
				return errUserGone // deleted (and created anew) since findUser
			}
			u.user, u.scope, u.found = res.User, res.Scope, res.Found
		}
		user := u.user
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
			msgs    []store.ThreadMessage
		)
		isNew := errors.Is(err, store.ErrNotFound)
		switch {
		case isNew:
			// Its lines sort above the __state__ that handed its id out
			// (emptyStateSort), so that state never ties with the echo.
			th = store.Thread{AccountID: c.acct.ID, ChatID: chatID, AgentID: c.agent.ID, UserID: user.ID, LastSort: emptyStateSort, CreatedAt: now, UpdatedAt: now}
		case err != nil:
			return err
		case th.AgentID != c.agent.ID:
			return errChatGone
		case th.UserID != user.ID:
			return errNotOwner
		default:
			if msgs, err = tx.Messages(ctx, c.acct.ID, chatID); err != nil {
				return err
			}
			var last int64
			history, last = decodeHistory(msgs)
			th.LastSort = max(th.LastSort, last)
		}
		seq := newSequence(chatID, h.cfg.dev, th.LastSort, history)
		echo := seq.echo(newID(), req.Input)
		stored, err := toStored([]Message{echo})
		if err != nil {
			return err
		}
		maxSize, err := threadRoom(msgs, history, lim, h.cfg.maxTurnBytes, len(stored[0].Body))
		if err != nil {
			return err
		}
		// The echo reserves the turn's first block of sorts; a new thread
		// is stored with it.
		if isNew {
			th.LastSort = echo.Sort + sortBlock
			if err := tx.CreateThread(ctx, th, stored...); err != nil {
				switch {
				case errors.Is(err, store.ErrConflict):
					return errTurnRunning
				case errors.Is(err, store.ErrNotFound):
					return errUserGone
				}
				return err
			}
		} else if err := tx.AppendMessages(ctx, c.acct.ID, chatID, echo.Sort+sortBlock, stored); err != nil {
			return err
		}
		op = openedTurn{chatID: chatID, seq: seq, echo: echo, maxSize: maxSize, expires: user.ExpiresAt, info: Turn{
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

// startTurn starts the turn opened by openStream on its reservation t and
// writes the stream's first line. It returns the rest of the stream, which
// the request's goroutine runs: following the turn to its end.
func (h *Handler) startTurn(w http.ResponseWriter, r *http.Request, t *turn, op openedTurn) func() {
	ctx := r.Context()
	t.seq = op.seq
	t.reserved = op.echo.Sort + sortBlock // stored with the echo
	start := op.seq.start(newID())
	info := op.info
	t.begin(ctx, h.cfg.turnTimeout, errDeadline, h.agent, &info, op.user, op.echo, start)
	if left := op.expires.Sub(h.cfg.now()); !op.expires.IsZero() && left < h.cfg.turnTimeout {
		h.endAtExpiry(t, max(left, 0))
	}
	// Started before the first line goes out: a request that rejoins
	// the chat once that line is read finds the turn running.
	lw := h.newLineWriter(r, w)
	lw.hold = true
	lw.send(cutoffMessage(op.chatID, false))
	return func() {
		defer lw.end()
		h.followTurn(ctx, lw, t, 0, h.cfg.cancelOnDisconnect)
	}
}

// endAtExpiry ends t, a turn of an ephemeral user, after left, when the
// user expires: an ephemeral user is invisible from then on, with its
// threads, so the turn ends as when its thread is deleted; unless the user
// was made persistent meanwhile (generate-session, or a chat request with
// isEphemeral false).
func (h *Handler) endAtExpiry(t *turn, left time.Duration) {
	timer := time.AfterFunc(left, func() {
		u, err := h.st.UserByID(t.ctx, t.userID, h.cfg.now())
		if err == nil && !u.Ephemeral {
			return
		}
		t.cancel(errThreadDeleted)
	})
	context.AfterFunc(t.ctx, func() { timer.Stop() })
}

// followTurn streams the turn t to lw, skipping lines whose sort is not
// above after, until it ends or the client goes away; with stopOnDisconnect
// a client that goes away stops the turn. A stream that can be detached is
// followed on a goroutine of the registry and followTurn returns at once
// (see "Detaching a stream"). The request's goroutine waits here for the
// turn's life otherwise, so it is a short call chain.
func (h *Handler) followTurn(ctx context.Context, lw *lineWriter, t *turn, after int64, stopOnDisconnect bool) {
	if lw.closing && h.turns.enterStream() {
		if lw.detach() {
			h.turns.trackStream(lw)
			go func() {
				defer h.turns.leaveStream(lw)
				defer lw.close()
				t.stream(lw.ctx, lw, after, stopOnDisconnect)
			}()
			return
		}
		h.turns.ended()
	}
	t.stream(ctx, lw, after, stopOnDisconnect)
}

// stream follows t to lw (see follow); with stopOnDisconnect a client that
// went away stops the turn.
func (t *turn) stream(ctx context.Context, lw *lineWriter, after int64, stopOnDisconnect bool) {
	if !t.follow(ctx, lw, after) && stopOnDisconnect && ctx.Err() != nil {
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
func turnUser(u store.User, data store.UserData) User {
	tu := User{ExternalID: u.ExternalID, InternalID: u.InternalID, Email: u.Email, DisplayName: u.DisplayName, SecurityContext: u.SecurityContext}
	if len(data.Attributes) > 0 {
		tu.Attributes = make(map[string]any, len(data.Attributes))
		for _, a := range data.Attributes {
			if v, ok := attrValue(a); ok {
				tu.Attributes[a.Name] = v
			}
		}
	}
	for _, g := range data.Groups {
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
