package embedsession

import (
	"math"
	"testing"
)

// FuzzCursor checks that cursors round-trip, that decoding arbitrary input
// never panics, and that only canonical cursors of positive ids decode.
func FuzzCursor(f *testing.F) {
	for _, id := range []int64{1, 42, math.MaxInt64} {
		f.Add(encodeCursor(id), id)
	}
	f.Add("", int64(0))
	f.Add("djE6MA", int64(-1)) // "v1:0"
	f.Add("!!", int64(7))
	f.Fuzz(func(t *testing.T, s string, id int64) {
		if id > 0 {
			got, err := decodeCursor(encodeCursor(id))
			if err != nil || got != id {
				t.Fatalf("round trip of %d = %d, %v", id, got, err)
			}
		}
		got, err := decodeCursor(s)
		if err != nil {
			return
		}
		if got <= 0 {
			t.Fatalf("decodeCursor(%q) = %d, want a positive id", s, got)
		}
		if enc := encodeCursor(got); enc != s {
			t.Fatalf("decodeCursor(%q) = %d, which encodes as %q: not canonical", s, got, enc)
		}
	})
}
