package wire

import (
	"net/http"
	"strconv"
	"time"
)

// TooMany returns a 429 *Error whose answer carries Retry-After: after.
func TooMany(after time.Duration, format string, args ...any) *Error {
	e := Errorf(http.StatusTooManyRequests, format, args...)
	e.RetryAfter = max(after, time.Second)
	return e
}

// retryAfter formats d as the seconds of a Retry-After header, rounded up.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}
