package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// defaultDataSQL is the data mode's query: a cross join over the demo
// views, more rows than the data query API's cap of 100,000.
const defaultDataSQL = "SELECT o.order_id, o.product, o.country, p.name, p.price FROM orders AS o CROSS JOIN products AS p"

// runData drives the data query API: -c clients in a closed loop, each
// sending -sql for the internal user (every row) and reading the whole
// answer (NDJSON, or CSV with -csv). It reports requests, rows and bytes
// per second, the time to the first line and to the end, and, with -pid,
// the server's CPU time and resident memory before and after.
func runData(ctx context.Context, cfg config) error {
	c := newHTTPClient(cfg.concurrency)
	url := fmt.Sprintf("%s/api/v1/public/%s/agents/%s/sql", cfg.url, cfg.account, cfg.agent)
	body, err := json.Marshal(map[string]any{"sqlQuery": cfg.sql, "sessionSettings": map[string]any{"internalId": cfg.internalID}})
	if err != nil {
		return err
	}
	rssBefore := processRSS(cfg.pid)
	cpu := startCPU(cfg.pid)
	var (
		rows, bytesRead, failures atomic.Int64
		first, whole              latencies
		peakRSS                   atomic.Int64
		wg                        sync.WaitGroup
	)
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	if cfg.pid != 0 {
		wg.Go(func() { // the server's memory while it streams
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					if r := processRSS(cfg.pid); r > peakRSS.Load() {
						peakRSS.Store(r)
					}
				}
			}
		})
	}
	start := time.Now()
	for range cfg.concurrency {
		wg.Go(func() {
			for runCtx.Err() == nil {
				n, size, ttfl, took, err := dataOnce(runCtx, c, url, cfg.key, body, cfg.csv)
				if runCtx.Err() != nil {
					return // cut by the end of the run: not counted
				}
				if err != nil {
					failures.Add(1)
					fmt.Fprintln(os.Stderr, "loadgen:", err)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				rows.Add(n)
				bytesRead.Add(size)
				first.add(ttfl)
				whole.add(took)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	format := "NDJSON"
	if cfg.csv {
		format = "CSV"
	}
	n := whole.count()
	fmt.Printf("data query (%s), %d clients, %v: %d requests, %d failed\n", format, cfg.concurrency, elapsed.Round(time.Millisecond), n, failures.Load())
	fmt.Printf("  rows/s %.0f, MB/s %.1f, rows per request %.0f\n", float64(rows.Load())/elapsed.Seconds(),
		float64(bytesRead.Load())/elapsed.Seconds()/1e6, float64(rows.Load())/float64(max(n, 1)))
	fmt.Printf("  first line p50 %v p99 %v; whole answer p50 %v p99 %v\n", first.percentile(0.5).Round(time.Microsecond),
		first.percentile(0.99).Round(time.Microsecond), whole.percentile(0.5).Round(time.Millisecond), whole.percentile(0.99).Round(time.Millisecond))
	cpu.report(n, "request")
	if cfg.pid != 0 {
		fmt.Printf("  server RSS before %d MiB, peak %d MiB, after %d MiB\n", rssBefore>>20, peakRSS.Load()>>20, processRSS(cfg.pid)>>20)
	}
	return nil
}

// dataOnce sends one data query and reads its answer, counting the rows:
// the data lines' rows (NDJSON) or the records after the header (CSV).
func dataOnce(ctx context.Context, c *http.Client, url, key string, body []byte, csv bool) (rows, size int64, ttfl, took time.Duration, err error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Api-Key "+key)
	if csv {
		req.Header.Set("Accept", "text/csv")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, 0, 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	line, err := br.ReadSlice('\n')
	ttfl = time.Since(start)
	size = int64(len(line))
	if err != nil {
		return 0, size, ttfl, 0, fmt.Errorf("first line: %w", err)
	}
	if csv {
		// Records hold no quoted line breaks in the default query; a
		// count of line ends is the count of records.
		for {
			chunk, err := br.ReadSlice('\n')
			size += int64(len(chunk))
			if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
				rows++
			}
			if err == io.EOF {
				break
			}
			if err != nil && err != bufio.ErrBufferFull {
				return rows, size, ttfl, 0, err
			}
		}
		if got := resp.Trailer.Get("Embedkit-Total-Rows"); got != strconv.FormatInt(rows, 10) {
			return rows, size, ttfl, 0, fmt.Errorf("%d records, trailer Embedkit-Total-Rows %q", rows, got)
		}
		return rows, size, ttfl, time.Since(start), nil
	}
	for {
		line, err := br.ReadBytes('\n')
		size += int64(len(line))
		switch {
		case bytes.HasPrefix(line, []byte(`{"data":[`)):
			// Rows are arrays: count the ones opening at depth 2.
			rows += int64(countRows(line))
		case bytes.HasPrefix(line, []byte(`{"totalRows":`)):
			return rows, size, ttfl, time.Since(start), nil
		case bytes.HasPrefix(line, []byte(`{"error":`)):
			return rows, size, ttfl, 0, fmt.Errorf("%s", bytes.TrimSpace(line))
		}
		if err != nil {
			return rows, size, ttfl, 0, fmt.Errorf("the stream ended before totalRows: %w", err)
		}
	}
}

// countRows counts the rows of a data line: the arrays that open inside
// the outer data array, outside strings.
func countRows(line []byte) int {
	n, depth, inString := 0, 0, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[':
			depth++
			if depth == 2 {
				n++
			}
		case c == ']':
			depth--
		}
	}
	return n
}

// processRSS returns the resident memory of process pid in bytes, from
// /proc/<pid>/status (0 without -pid or when it cannot be read).
func processRSS(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
