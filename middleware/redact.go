package middleware

import (
	"log/slog"

	"github.com/embedkit/embedkit/internal/telemetry"
)

// RedactSessionID returns s (a URL, a log message...) with the value of
// every sessionId query parameter ([SessionIDParam]) replaced by
// "REDACTED": "/embed?sessionId=abc&x=1" becomes
// "/embed?sessionId=REDACTED&x=1". The name matches as a query decodes it
// (percent-encoded, "session%49d"), in any letter case, and also inside
// another URL's query ("%3FsessionId%3Dabc"). The
// handlers and middleware of embedkit apply it to every line they log; a
// host uses it for its own access logs of embed pages.
func RedactSessionID(s string) string { return telemetry.RedactSessionID(s) }

// RedactingLogHandler returns a slog.Handler passing records to h with
// [RedactSessionID] applied to the message and to every attribute.
func RedactingLogHandler(h slog.Handler) slog.Handler { return telemetry.RedactingHandler(h) }
