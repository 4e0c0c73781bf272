// Package httperr is embedkit's one error type for HTTP and its writer.
// Every non-2xx answer of embedkit's handlers and middleware is written by
// [Write] as
//
//	{"error": "<message>"}
//
// with Content-Type: application/json, and both Go clients
// (embedsession.Client, chatstream.Client) return an answer like that as an
// [*Error]. Host middleware in front of embedkit's routes uses [Write] (or
// [Errorf] with [Write]) to answer in the same format.
//
// [Status] maps any error to its status and message: an [*Error] to its own;
// a body over the size cap (*http.MaxBytesError) to 413; a store that cannot
// be reached ([store.ErrUnavailable]) or a deadline to 503; anything else to
// 500 "internal error", so that no internal detail reaches a client.
//
// It is a package of its own, not part of package middleware, so that the
// clients and every handler can share it without importing the middleware.
package httperr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/embedkit/embedkit/store"
)

// Error is an error with the HTTP status and the client-facing message it
// maps to. Err, if set, is the cause: it is logged, never sent.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Message is the text of the "error" field: safe to show to the caller.
	Message string
	// Err is the cause, for logs and errors.Is; never sent to the client.
	// The clients leave it nil.
	Err error
	// RetryAfter, when above zero, is sent by [Write] as the Retry-After
	// header, in whole seconds rounded up (a 429 of an account limit says
	// when to try again). The clients leave it zero.
	RetryAfter time.Duration
	// Limit names the limit that refused the request (runningTurns,
	// runningTurnsPerUser, newEphemeralUsersPerMinute, embedTenants,
	// threadTurns or threadBytes, maxExternalUsers), "" otherwise. It is not
	// sent; embedkit's handlers count it in the embedkit.limit.rejections
	// metric.
	Limit string
}

// Error returns "<status> <status text>: <message>", followed by ": <cause>"
// when Err is set.
func (e *Error) Error() string {
	s := fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with status and a formatted message.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// Status returns the HTTP status and client message that err maps to (see
// the package documentation).
func Status(err error) (int, string) {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Status, e.Message
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return http.StatusRequestEntityTooLarge, "request body too large"
	}
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable, "service unavailable, try again"
	}
	if errors.Is(err, context.Canceled) {
		// The client went away; the status is never seen.
		return 499, "request canceled"
	}
	return http.StatusInternalServerError, "internal error"
}

// Write answers err as {"error": message} with the status [Status] maps it
// to, Content-Type: application/json and Cache-Control: no-store, plus
// Retry-After when err is an [*Error] with a RetryAfter, and on a 401
// WWW-Authenticate: Api-Key, Bearer unless the header is set already. The cause of a 5xx
// answer is logged on log at level Error when log is not nil, never sent.
func Write(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	status, msg := Status(err)
	if e, ok := errors.AsType[*Error](err); ok && e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	if status >= 500 && log != nil {
		log.LogAttrs(r.Context(), slog.LevelError, "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.String("error", err.Error()))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)  // "<key>" stays readable; the body is JSON, never HTML
	_ = enc.Encode(body{msg}) // a struct of one string always encodes
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized && h.Get("WWW-Authenticate") == "" {
		// A 401 names the schemes that can authenticate (RFC 9110 §11.6.1);
		// the message says which one the route wants.
		h.Set("WWW-Authenticate", "Api-Key, Bearer")
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type body struct {
	Error string `json:"error"`
}

// Parse returns the *Error of an answer with status and its body, as the
// clients read it: the message is the body's "error" field, or the status
// text when the body holds none.
func Parse(status int, b []byte) *Error {
	var v body
	if json.Unmarshal(b, &v) != nil || v.Error == "" {
		v.Error = http.StatusText(status)
	}
	return &Error{Status: status, Message: v.Error}
}
