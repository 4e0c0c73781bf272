package wire

import (
	"net/http"
	"time"
)

// TooMany returns a 429 *Error whose answer carries Retry-After: after.
func TooMany(after time.Duration, format string, args ...any) *Error {
	e := Errorf(http.StatusTooManyRequests, format, args...)
	e.RetryAfter = max(after, time.Second)
	return e
}
