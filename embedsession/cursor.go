package embedsession

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// Cursors are opaque to clients: base64url (no padding) of "v1:<id>", the
// last id of a page. Keyset pagination resumes after that id.
const cursorPrefix = "v1:"

var errBadCursor = errors.New("bad cursor")

func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatInt(id, 10)))
}

// decodeCursor accepts exactly what encodeCursor produces for a positive id.
func decodeCursor(s string) (int64, error) {
	if len(s) > 64 {
		return 0, errBadCursor
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return 0, errBadCursor
	}
	digits, ok := strings.CutPrefix(string(b), cursorPrefix)
	if !ok || digits == "" || digits[0] == '0' || digits[0] == '+' || digits[0] == '-' {
		return 0, errBadCursor
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || id <= 0 || encodeCursor(id) != s {
		// the decoder skips \r and \n: accept only the canonical form
		return 0, errBadCursor
	}
	return id, nil
}
