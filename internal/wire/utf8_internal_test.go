package wire

import (
	"bytes"
	"testing"
)

// BenchmarkBadTextOffset is the cost of the strict UTF-8 check alone on a
// typical body (valid text, non-ASCII included) and on a 1 MiB one.
func BenchmarkBadTextOffset(b *testing.B) {
	small := []byte(`{"deploymentId":1,"externalId":"jane.doe@example.com","email":"jane.doe@example.com",` +
		`"userProfile":{"displayName":"Jane Doë – 日本","picture":"https://cdn.example.com/u/jane.png"},` +
		`"userAttributes":[{"name":"country","value":"DE"},{"name":"region_ids","value":[1,2,3]}],` +
		`"groups":["sales","marketing"],"securityContext":{"tenant":"acme","level":3}}`)
	large := append(append([]byte(`{"input":"`), bytes.Repeat([]byte("Grüße, 日本 \\u00e9 "), (1<<20)/24)...), `"}`...)
	for _, c := range []struct {
		name string
		body []byte
	}{{"typical", small}, {"1MiB", large}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if badTextOffset(c.body) >= 0 {
					b.Fatal("flagged valid text")
				}
			}
		})
	}
}
