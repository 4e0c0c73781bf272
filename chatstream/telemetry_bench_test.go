//go:build unix

package chatstream_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
)

// cpuTime is the CPU time (user and system) of the process so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTurnTelemetry runs the workload of BenchmarkParallelTurns (16
// clients per CPU, one-piece turns over loopback HTTP, SQLite) with the
// handler's telemetry on the global no-op providers ("noop", the default)
// and on OpenTelemetry's SDK ("sdk": every span sampled and batched to a
// discarding exporter, every metric aggregated). It reports the process's
// CPU time per turn (client, server and database together): the difference
// between the two is what the SDK costs per turn.
func BenchmarkTurnTelemetry(b *testing.B) {
	for _, mode := range []string{"noop", "sdk"} {
		b.Run(mode, func(b *testing.B) {
			var opts []chatstream.Option
			if mode == "sdk" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				b.Cleanup(func() {
					_ = tp.Shutdown(context.Background())
					_ = mp.Shutdown(context.Background())
				})
				opts = []chatstream.Option{chatstream.WithTracerProvider(tp), chatstream.WithMeterProvider(mp)}
			}
			e := newEnv(b, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: pieces(1), opts: opts})
			var n atomic.Int64
			b.SetParallelism(16)
			b.ReportAllocs()
			cpu0, start := cpuTime(b), time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := n.Add(1)
					for _, err := range e.client.Stream(b.Context(), acct, agentID, chatstream.Request{Input: "go", SessionSettings: ext(fmt.Sprintf("par-%d", id%100))}) {
						if err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
			turns := float64(n.Load())
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/turns, "cpu-µs/turn")
			b.ReportMetric(turns/time.Since(start).Seconds(), "turns/s")
		})
	}
}
