package pgcluster_test

import (
	"fmt"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
)

// BenchmarkClaim measures a claim and its release, without limits (one
// statement) and with them (a transaction: lock, count, insert).
func BenchmarkClaim(b *testing.B) {
	for _, tc := range []struct {
		name string
		lim  chatstream.TurnLimits
	}{{"unlimited", chatstream.TurnLimits{}}, {"limited", chatstream.TurnLimits{Account: 200, User: 3}}} {
		b.Run(tc.name, func(b *testing.B) {
			_, a, _ := replicas(b, nil, nil)
			i := 0
			for b.Loop() {
				i++
				ct, err := a.Claim(b.Context(), key(fmt.Sprintf("c%d", i%50)), int64(i%7), tc.lim)
				if err != nil {
					b.Fatal(err)
				}
				if err := ct.Release(b.Context(), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
