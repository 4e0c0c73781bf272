package chatstream_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
)

func benchEnv(b *testing.B, agent chatstream.Agent) *env {
	b.Helper()
	return newEnv(b, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
}

func pieces(n int) *chatstreamtest.ScriptedAgent {
	ev := make([]chatstreamtest.Event, n)
	for i := range ev {
		ev[i] = chatstreamtest.Content("word ")
	}
	return &chatstreamtest.ScriptedAgent{Events: ev}
}

// BenchmarkStreamLines streams turns of 10,000 content pieces from a
// zero-delay agent over loopback HTTP and reports lines per second on one
// stream. The client only splits lines ("raw") or decodes them with
// chatstream.Client ("client").
func BenchmarkStreamLines(b *testing.B) {
	e := benchEnv(b, pieces(10000))
	body := []byte(`{"input":"go","sessionSettings":{"externalId":"bench"}}`)
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		var lines int
		start := time.Now()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodPost, e.URL+streamPath(acct, agentID), bytes.NewReader(body))
			req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.Client().Do(req)
			if err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReaderSize(resp.Body, 64<<10)
			for {
				_, err := br.ReadSlice('\n')
				if err == bufio.ErrBufferFull {
					continue
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				lines++
			}
			resp.Body.Close()
		}
		b.ReportMetric(float64(lines)/time.Since(start).Seconds(), "lines/s")
	})
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		var lines int
		start := time.Now()
		for b.Loop() {
			for _, err := range e.client.Stream(b.Context(), acct, agentID, chatstream.Request{Input: "go", SessionSettings: ext("bench")}) {
				if err != nil {
					b.Fatal(err)
				}
				lines++
			}
		}
		b.ReportMetric(float64(lines)/time.Since(start).Seconds(), "lines/s")
	})
}

// BenchmarkTimeToFirstLine measures the time from sending a chat request to
// reading the first line (__cutoff__), which includes provisioning the
// user, creating the thread and storing the user echo. It reports the
// latency of the first line and of the first content line.
func BenchmarkTimeToFirstLine(b *testing.B) {
	e := benchEnv(b, pieces(1))
	b.ReportAllocs()
	var first, content time.Duration
	for b.Loop() {
		t0 := time.Now()
		n := 0
		for m, err := range e.client.Stream(b.Context(), acct, agentID, chatstream.Request{Input: "go", SessionSettings: ext("ttfl")}) {
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				first += time.Since(t0)
			}
			if isContent(m) {
				content += time.Since(t0)
			}
			n++
		}
	}
	b.ReportMetric(float64(first.Microseconds())/float64(b.N), "µs/first-line")
	b.ReportMetric(float64(content.Microseconds())/float64(b.N), "µs/first-content")
}
