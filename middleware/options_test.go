package middleware_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/optiontest"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store/gormstore"
)

// Options are typed per middleware: a cookie option given to APIKey, or
// Optional given to Session, does not compile.
// internal/optiontest/compile_test.go checks this with the compiler.
var (
	_ middleware.APIKeyOption        = middleware.Optional()
	_ middleware.SessionOption       = middleware.WithCookieName("c")
	_ middleware.KeyOption           = middleware.WithKeyCache(time.Second)
	_ middleware.Option              = middleware.WithClock(time.Now)
	_ middleware.APIKeyOrTokenOption = middleware.WithClock(time.Now)
)

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, with a message naming the package, the
// option and the value, and that APIKey, Session and APIKeyOrToken panic
// on a nil store, a nil interface or a nil pointer in one.
func TestInvalidOptionsPanic(t *testing.T) {
	optiontest.Panics(t, map[string]func(){
		"middleware: APIKey: store must not be nil, got nil":                                                                                      func() { middleware.APIKey(nil) },
		"middleware: Session: store must not be nil, got nil":                                                                                     func() { middleware.Session(nil) },
		"middleware: APIKeyOrToken: store must not be nil, got nil":                                                                               func() { middleware.APIKeyOrToken(nil) },
		"middleware: APIKey: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)":        func() { middleware.APIKey((*gormstore.Store)(nil)) },
		"middleware: Session: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)":       func() { middleware.Session((*gormstore.Store)(nil)) },
		"middleware: APIKeyOrToken: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)": func() { middleware.APIKeyOrToken((*gormstore.Store)(nil)) },
		"middleware: WithLogger: logger must not be nil, got nil (leave the option out to log nothing)":                                           func() { middleware.WithLogger(nil) },
		"middleware: WithClock: clock must not be nil, got nil":                                                                                   func() { middleware.WithClock(nil) },
		"middleware: WithTokenTTL: duration must be positive, got 0s":                                                                             func() { middleware.WithTokenTTL(0) },
		"middleware: WithTokenTTL: duration must be positive, got -1m0s":                                                                          func() { middleware.WithTokenTTL(-time.Minute) },
		`middleware: WithCookieName: invalid cookie name, got ""`:                                                                                 func() { middleware.WithCookieName("") },
		`middleware: WithCookieName: invalid cookie name, got "a b"`:                                                                              func() { middleware.WithCookieName("a b") },
		`middleware: WithCookieName: invalid cookie name, got "a=b"`:                                                                              func() { middleware.WithCookieName("a=b") },
		`middleware: WithCookiePath: path must start with "/" and hold no ';' or control character, got ""`:                                       func() { middleware.WithCookiePath("") },
		`middleware: WithCookiePath: path must start with "/" and hold no ';' or control character, got "embed"`:                                  func() { middleware.WithCookiePath("embed") },
		`middleware: WithCookiePath: path must start with "/" and hold no ';' or control character, got "/a;b"`:                                   func() { middleware.WithCookiePath("/a;b") },
		"middleware: WithCookieSameSite: not an http.SameSite mode, got 0":                                                                        func() { middleware.WithCookieSameSite(0) },
		"middleware: WithCookieSameSite: not an http.SameSite mode, got 5":                                                                        func() { middleware.WithCookieSameSite(http.SameSiteNoneMode + 1) },
		"middleware: WithKeyCache: ttl must be between 0 and MaxKeyCacheTTL (5s), got -1s":                                                        func() { middleware.WithKeyCache(-time.Second) },
		"middleware: WithKeyCache: ttl must be between 0 and MaxKeyCacheTTL (5s), got 5.000000001s":                                               func() { middleware.WithKeyCache(middleware.MaxKeyCacheTTL + 1) },
		"middleware: WithKeyCacheSize: count must be positive, got -1":                                                                            func() { middleware.WithKeyCacheSize(-1) },
	})
	middleware.WithKeyCache(0) // no cache: valid
}
