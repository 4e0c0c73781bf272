package chatstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/optiontest"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// Options are typed per constructor: an option that NewHandler does not
// read (WithReapBatch) does not compile there, nor one that NewReaper does
// not read (WithDevelopment, WithTurnTimeout, ...) in NewReaper.
// internal/optiontest/compile_test.go checks this with the compiler.
var (
	_ chatstream.Option       = chatstream.WithTurnTimeout(time.Second)
	_ chatstream.ReaperOption = chatstream.WithReapBatch(1)
	_ chatstream.SharedOption = chatstream.WithClock(time.Now)
)

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, with a message naming the package, the
// option and the value, and that NewHandler and NewReaper panic on a nil
// store or agent, a nil interface or a nil pointer or func in one.
func TestInvalidOptionsPanic(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	agent := chatstream.AgentFunc(func(context.Context, chatstream.Turn, chatstream.Emitter) error { return nil })
	optiontest.Panics(t, map[string]func(){
		"chatstream: NewHandler: store must not be nil, got nil":                                                                                    func() { chatstream.NewHandler(nil, agent) },
		"chatstream: NewHandler: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)":      func() { chatstream.NewHandler((*gormstore.Store)(nil), agent) },
		"chatstream: NewHandler: agent must not be nil, got nil":                                                                                    func() { chatstream.NewHandler(st, nil) },
		"chatstream: NewHandler: agent must not be nil, got (chatstream.AgentFunc)(nil) (was the error of the function that returned it ignored?)":  func() { chatstream.NewHandler(st, chatstream.AgentFunc(nil)) },
		"chatstream: NewReaper: interval must not be negative, got -1s (0 for DefaultReapInterval)":                                                 func() { chatstream.NewReaper(st, -time.Second) },
		"chatstream: NewReaper: store must not be nil, got nil":                                                                                     func() { chatstream.NewReaper(nil, time.Minute) },
		"chatstream: NewReaper: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)":       func() { chatstream.NewReaper((*gormstore.Store)(nil), time.Minute) },
		"chatstream: WithCluster: cluster must not be nil, got (*pgcluster.Cluster)(nil) (was the error of the function that returned it ignored?)": func() { chatstream.WithCluster((*pgcluster.Cluster)(nil)) },
		"chatstream: WithTurnTimeout: duration must be positive, got 0s":                                                                            func() { chatstream.WithTurnTimeout(0) },
		"chatstream: WithTurnTimeout: duration must be positive, got -1s":                                                                           func() { chatstream.WithTurnTimeout(-time.Second) },
		"chatstream: WithDefaultEphemeralTTL: duration must be positive, got 0s":                                                                    func() { chatstream.WithDefaultEphemeralTTL(0) },
		"chatstream: WithLogger: logger must not be nil, got nil (leave the option out to log nothing)":                                             func() { chatstream.WithLogger(nil) },
		"chatstream: WithClock: clock must not be nil, got nil":                                                                                     func() { chatstream.WithClock(nil) },
		"chatstream: WithReapBatch: count must be positive, got 0":                                                                                  func() { chatstream.WithReapBatch(0) },
		"chatstream: WithMaxTurnBytes: count must be positive, got -1":                                                                              func() { chatstream.WithMaxTurnBytes(-1) },
		"chatstream: WithCluster: cluster must not be nil, got nil (leave the option out for a single process)":                                     func() { chatstream.WithCluster(nil) },
		`chatstream: WithAPIKey: key must not be empty, got ""`:                                                                                     func() { chatstream.WithAPIKey("") },
		`chatstream: WithBearerToken: token must not be empty, got ""`:                                                                              func() { chatstream.WithBearerToken("") },
		"chatstream: WithStreamWriteTimeout: duration must be positive, got 0s":                                                                     func() { chatstream.WithStreamWriteTimeout(0) },
		"chatstream: WithTracerProvider: provider must not be nil, got nil (leave the option out for the global one)":                               func() { chatstream.WithTracerProvider(nil) },
		"chatstream: WithMeterProvider: provider must not be nil, got nil (leave the option out for the global one)":                                func() { chatstream.WithMeterProvider(nil) },
		"chatstream: WithHTTPClient: client must not be nil, got nil":                                                                               func() { chatstream.WithHTTPClient(nil) },
		"chatstream: WithDataRowLimit: count must be positive, got 0":                                                                               func() { chatstream.WithDataRowLimit(0) },
		"chatstream: WithDataTimeout: duration must be positive, got -1s":                                                                           func() { chatstream.WithDataTimeout(-time.Second) },
		"chatstream: WithKeyCache: ttl must be between 0 and middleware.MaxKeyCacheTTL (5s), got -1ns":                                              func() { chatstream.WithKeyCache(-1) },
		"chatstream: WithKeyCache: ttl must be between 0 and middleware.MaxKeyCacheTTL (5s), got 6s":                                                func() { chatstream.WithKeyCache(6 * time.Second) },
	})
}

// TestHandlerOptionsTakeEffect checks the option of the handler that no
// other test sets, WithDefaultEphemeralTTL, and that chat enforces the
// account's user limit (store.Account.ExternalUserLimit, its one owner).
func TestHandlerOptionsTakeEffect(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{
			opts: []chatstream.Option{chatstream.WithDefaultEphemeralTTL(time.Hour)},
			cfg:  func(c *operator.Config) { c.Accounts[0].MaxExternalUsers = 1 },
		})
		ctx := t.Context()
		if _, err := collectErr(ctx, e.client, chatstream.Request{Input: "echo:x", SessionSettings: ext("eph")}); err != nil {
			t.Fatal(err)
		}
		u, err := e.Store.UserByKey(ctx, store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: "eph"}, e.Now())
		if err != nil || !u.Ephemeral || !u.ExpiresAt.Equal(e.Now().Add(time.Hour)) {
			t.Errorf("user = %+v, %v; want ephemeral expiring in 1h", u, err)
		}
		f := false
		if _, err := collectErr(ctx, e.client, chatstream.Request{Input: "echo:x", SessionSettings: &chatstream.SessionSettings{ExternalID: "p1", IsEphemeral: &f}}); err != nil {
			t.Fatalf("first persistent user: %v", err)
		}
		if _, err := collectErr(ctx, e.client, chatstream.Request{Input: "echo:x", SessionSettings: &chatstream.SessionSettings{ExternalID: "p2", IsEphemeral: &f}}); apiStatus(err) != 403 {
			t.Errorf("second persistent user past the account's MaxExternalUsers (1): %v, want 403", err)
		}
	})
}
