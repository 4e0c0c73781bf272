package analytics_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
)

// TestPostgresNumericBounds: a numeric's digits count toward the tool's
// 4 MiB result cap as a text's do, and a numeric beyond a float64's range
// is its digits as text (a JSON reader would take the number for an
// infinity).
func TestPostgresNumericBounds(t *testing.T) {
	if os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN") == "" {
		t.Skip("EMBEDKIT_TEST_POSTGRES_DSN not set")
	}
	f := newPGFixture(t)
	tool := f.tool(t)
	for _, q := range []string{
		"SELECT repeat('9', 131000) AS n FROM generate_series(1, 100)",
		"SELECT repeat('9', 131000)::numeric AS n FROM generate_series(1, 100)",
	} {
		res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
		if err == nil {
			b, _ := json.Marshal(res)
			t.Errorf("%s: %d rows, %d bytes of JSON, want %q", q, len(res.Data), len(b), "result too large")
			continue
		}
		toolError(t, q, err, "result too large")
	}
	res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "SELECT 10::numeric ^ 400 AS big, -(10::numeric ^ 400) AS small"})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range res.Data[0] {
		if s, ok := v.(string); !ok || len(s) < 400 {
			t.Errorf("column %d = %T %.40v, want the digits as text", i, v, v)
		}
	}
}
