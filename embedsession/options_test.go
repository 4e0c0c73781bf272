package embedsession_test

import (
	"testing"
	"time"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/optiontest"
	"github.com/embedkit/embedkit/store/gormstore"
)

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, with a message naming the package, the
// option and the value, and that NewHandler panics on a nil store, a nil
// interface or a nil pointer in one.
func TestInvalidOptionsPanic(t *testing.T) {
	optiontest.Panics(t, map[string]func(){
		"embedsession: NewHandler: store must not be nil, got nil": func() { embedsession.NewHandler(nil) },
		"embedsession: NewHandler: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)": func() {
			embedsession.NewHandler((*gormstore.Store)(nil))
		},
		"embedsession: WithSessionTTL: duration must be positive, got 0s":                                               func() { embedsession.WithSessionTTL(0) },
		"embedsession: WithTokenTTL: duration must be positive, got -1s":                                                func() { embedsession.WithTokenTTL(-time.Second) },
		"embedsession: WithMaxEmbedTenants: count must be positive, got 0":                                              func() { embedsession.WithMaxEmbedTenants(0) },
		"embedsession: WithLogger: logger must not be nil, got nil (leave the option out to log nothing)":               func() { embedsession.WithLogger(nil) },
		"embedsession: WithClock: clock must not be nil, got nil":                                                       func() { embedsession.WithClock(nil) },
		"embedsession: WithHTTPClient: client must not be nil, got nil":                                                 func() { embedsession.WithHTTPClient(nil) },
		"embedsession: WithCacheSize: count must be positive, got 0":                                                    func() { embedsession.WithCacheSize(0) },
		"embedsession: WithTracerProvider: provider must not be nil, got nil (leave the option out for the global one)": func() { embedsession.WithTracerProvider(nil) },
		"embedsession: WithMeterProvider: provider must not be nil, got nil (leave the option out for the global one)":  func() { embedsession.WithMeterProvider(nil) },
		"embedsession: WithCacheTTL: duration must not be negative, got -1ms":                                           func() { embedsession.WithCacheTTL(-time.Millisecond) },
	})
}
