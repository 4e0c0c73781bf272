package chatstream

import (
	"context"
	"errors"
	"net/http"

	"github.com/embedkit/embedkit/store"
)

// serveAbort answers POST .../chat/abort: once the caller may abort the
// chat (abortable), its turn is stopped where it runs, here (abortHere) or
// on another replica (abortElsewhere), and the answer, 204, waits until the
// thread is free for the next input.
func (h *Handler) serveAbort(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c, req, err := admit(h, w, r, decodeAbortRequest, func(q AbortRequest) *SessionSettings { return q.SessionSettings })
	if err != nil {
		h.fail(w, r, err)
		return
	}
	key := turnKey{c.acct.ID, req.ChatID}
	owner, err := h.abortable(ctx, c, key, req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// The abort is answered once the thread is free for the next input
	// (or, at worst, after each step's clusterTimeout).
	elsewhere, err := h.abortHere(ctx, c, key, owner, req)
	if err == nil && elsewhere && h.cfg.cluster != nil {
		err = abortElsewhere(ctx, h.cfg.cluster, ThreadKey{AccountID: c.acct.ID, ChatID: req.ChatID})
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// turnOwner is the user and agent whose turn an abort may stop: a stored
// user, known by its id and, for an API key's caller, by the external id
// the request names, which is all a new user's first turn, opening, is
// known by until its transaction commits (an opening whose transaction
// runs again under the id of a user committed meanwhile keeps its old id
// until it rebinds).
type turnOwner struct {
	userID     int64
	externalID string
	agentID    string
}

// ownerOf is the turnOwner of the caller's user userID (0: not stored) in
// a request with settings s.
func ownerOf(c caller, s *SessionSettings, userID int64) turnOwner {
	o := turnOwner{userID: userID, agentID: c.agent.ID}
	if c.es == nil && s != nil {
		o.externalID = s.ExternalID
	}
	return o
}

// owns reports whether t is o's.
func (o turnOwner) owns(t *turn) bool {
	return t.agentID == o.agentID &&
		(o.userID != 0 && t.userID == o.userID || o.externalID != "" && t.externalID == o.externalID)
}

// abortHere stops owner's turn of key in this process, or marks it to
// abort as it starts when it is still opening, and waits until it ended or
// its opening was refused (at most clusterTimeout). It reports whether the
// chat's turn may run on another replica: none here, or, with a cluster,
// an opening here refused (say because the chat's turn runs elsewhere)
// while the thread is still the caller's, checked again. When the
// caller's opening was refused and no thread of the caller exists,
// nothing of the caller's runs, nor does it when another user's or
// agent's turn holds the chat here without a cluster. With one, another's
// opening here (of the caller's chat, which the cluster refuses while the
// caller's turn runs elsewhere) is waited for the same way, without
// aborting it; once started, it holds the chat's claim, so nothing of the
// caller's runs.
func (h *Handler) abortHere(ctx context.Context, c caller, key turnKey, owner turnOwner, req AbortRequest) (elsewhere bool, err error) {
	t, started, mine := h.turns.abort(key, owner)
	var othersStart <-chan struct{} // nil: never
	switch {
	case t == nil:
		return true, nil
	case !mine && (started || h.cfg.cluster == nil):
		return false, nil
	case !mine:
		othersStart = h.turns.whenStarted(t)
	case started:
		// On a goroutine of its own: its final write may outlast the
		// abort's bound on a database far too slow. The turn stays
		// registered until it ends, so Shutdown waits for it.
		go t.stop(errAborted, outcomeAborted)
	}
	wctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	select {
	case <-t.done:
	case <-othersStart:
		return false, nil
	case <-wctx.Done():
		return false, nil
	}
	if started || h.cfg.cluster == nil || h.turns.hasStarted(t) {
		return false, nil
	}
	_, err = h.abortable(ctx, c, key, req)
	if errors.Is(err, errChatGone) || errors.Is(err, errNotOwner) {
		return false, nil
	}
	return err == nil, err
}

// abortElsewhere asks the cluster to abort the turn of tk where it runs
// and waits until it ended there (at most clusterTimeout); nothing
// changes when none runs.
func abortElsewhere(ctx context.Context, cl Cluster, tk ThreadKey) error {
	wctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	ok, err := cl.Abort(wctx, tk)
	if err == nil && ok {
		err = waitRemoteEnd(wctx, cl, tk)
	}
	if err != nil {
		return clusterUnavailable(err)
	}
	return nil
}

// firstTurnOpening reports whether the first turn of the new chat key is
// opening in this process for the caller's user (stored, or created by
// that opening) and agent, and names them.
func (h *Handler) firstTurnOpening(ctx context.Context, c caller, key turnKey, s *SessionSettings) (turnOwner, bool, error) {
	if free, err := h.unclaimed(ctx, key); err != nil || !free {
		return turnOwner{}, false, err // a thread of another agent, or the database
	}
	u, _, err := h.lookupUser(ctx, c, s) // u.ID is 0 when not stored
	if err != nil {
		return turnOwner{}, false, err
	}
	o := ownerOf(c, s, u.ID)
	return o, h.turns.opening(key, o), nil
}

// abortable checks that the caller may abort the chat of key: its thread
// is the caller's, through this agent, or the first turn of a new chat is
// opening for the caller (its thread is stored as the turn opens). It
// names the caller's turn, or returns the error to answer with.
func (h *Handler) abortable(ctx context.Context, c caller, key turnKey, req AbortRequest) (turnOwner, error) {
	th, err := h.threadOf(ctx, c, req.ChatID, req.SessionSettings)
	if !errors.Is(err, errChatGone) {
		return ownerOf(c, req.SessionSettings, th.UserID), err
	}
	if o, opening, err := h.firstTurnOpening(ctx, c, key, req.SessionSettings); opening || err != nil {
		return o, err
	}
	// One more read decides: an opening, here or on another replica, may
	// have stored the thread since the first.
	free, err := h.unclaimed(ctx, key)
	switch {
	case err != nil:
		return turnOwner{}, err
	case !free:
		return h.threadAsAborted(ctx, c, req)
	case h.cfg.cluster != nil:
		return h.afterRemoteOpening(ctx, h.cfg.cluster, c, req)
	}
	return turnOwner{}, errChatGone
}

// unclaimed reports whether the chat of key is free for a new chat's
// first turn: no thread is stored, or the one stored is an expired
// ephemeral user's, as invisible as its owner (the opening deletes both).
func (h *Handler) unclaimed(ctx context.Context, key turnKey) (bool, error) {
	th, err := h.st.Thread(ctx, key.accountID, key.chatID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	}
	return ownerGone(ctx, h.st, th, h.cfg.now())
}

// threadAsAborted is threadOf for a thread stored after the abort came:
// another user's chat did not exist then, so it is 404 (errChatGone), as
// for an abort that came before its opening.
func (h *Handler) threadAsAborted(ctx context.Context, c caller, req AbortRequest) (turnOwner, error) {
	th, err := h.threadOf(ctx, c, req.ChatID, req.SessionSettings)
	if errors.Is(err, errNotOwner) {
		return turnOwner{}, errChatGone
	}
	return ownerOf(c, req.SessionSettings, th.UserID), err
}

// afterRemoteOpening answers for an abort of a chat whose thread is not
// stored: the first turn of a new chat may be opening on another replica,
// which claims the thread before it stores it. When a claim of the thread
// is live, it waits for the turn's first line (the user echo, logged once
// the thread is stored) or its end (an opening refused), at most
// clusterTimeout, and returns what threadAsAborted says then;
// errChatGone when no turn of the thread runs anywhere.
func (h *Handler) afterRemoteOpening(ctx context.Context, cl Cluster, c caller, req AbortRequest) (turnOwner, error) {
	wctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	rt, running, err := cl.Join(wctx, ThreadKey{AccountID: c.acct.ID, ChatID: req.ChatID})
	switch {
	case err != nil:
		return turnOwner{}, clusterUnavailable(err)
	case !running:
		return turnOwner{}, errChatGone
	}
	if _, _, err := rt.Next(wctx, 0); err != nil && !errors.Is(err, ErrTurnLost) && wctx.Err() == nil {
		return turnOwner{}, clusterUnavailable(err)
	}
	return h.threadAsAborted(ctx, c, req)
}

// waitRemoteEnd waits until the turn of key running on another replica has
// ended (its claim released), or ctx ends. It returns the error of a
// cluster that could not be read: the turn may still hold the thread.
func waitRemoteEnd(ctx context.Context, cl Cluster, key ThreadKey) error {
	rt, running, err := cl.Join(ctx, key)
	if err == nil && running {
		err = rt.Wait(ctx)
	}
	if err == nil || errors.Is(err, ErrTurnLost) || ctx.Err() != nil {
		return nil // ended, its process gone, or the wait's bound reached
	}
	return err
}
