package pgcluster_test

import (
	"fmt"
	"sync/atomic"
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

// BenchmarkTurnsParallel measures whole turns (a claim, two published
// lines, a release with a final line) run by many goroutines at once, as
// a loaded server ends many turns together.
func BenchmarkTurnsParallel(b *testing.B) {
	_, a, _ := replicas(b, nil, nil)
	var n atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			ct, err := a.Claim(b.Context(), key(fmt.Sprintf("c%d", i)), i%7, chatstream.TurnLimits{})
			if err != nil {
				b.Error(err)
				return
			}
			ct.Publish(mkLines(0, 2))
			if err := ct.Release(b.Context(), mkLines(2, 1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
