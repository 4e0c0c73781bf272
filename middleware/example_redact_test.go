package middleware_test

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/embedkit/embedkit/middleware"
)

// ExampleRedactSessionID scrubs the single-use sessionId from a URL before
// it is logged.
func ExampleRedactSessionID() {
	fmt.Println(middleware.RedactSessionID("/embed/profile?sessionId=6f1c2a&tab=2"))
	// Output: /embed/profile?sessionId=REDACTED&tab=2
}

// ExampleRedactingLogHandler wraps a host's log handler so that no line
// carries a sessionId, such as the access log of the host's embed pages.
func ExampleRedactingLogHandler() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // stable output
			}
			return a
		},
	})
	log := slog.New(middleware.RedactingLogHandler(h))
	log.Info("request", "url", "/embed/profile?sessionId=6f1c2a", "status", 200)
	// Output: level=INFO msg=request url="/embed/profile?sessionId=REDACTED" status=200
}
