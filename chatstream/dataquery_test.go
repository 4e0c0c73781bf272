package chatstream_test

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/logbuf"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// fakeSource is a DataSource whose queries are commands:
//
//	rows N            N rows of dataColumns
//	rows N fail K     the rows end with a timeout error after K rows
//	rows N wait K     after K rows, wait until the request's context ends
//	rows N ragged K   row K (from 0) holds one value more than the columns
//	rows N short K    row K (from 0) holds one value fewer
//	typed             one row of goValues: Go types a host's source may give
//	hostile           one row of values that need escaping
//	refuse            a refused query (a *QueryError before the first row)
//	boom              a fault of the source (not a QueryError)
//	stall             no first row until the context ends
//
// An unknown branch fails as the analytics executor does.
type fakeSource struct {
	mu    sync.Mutex
	turns []chatstream.Turn
	// timeout is the last timeout QueryData was given.
	timeout time.Duration
	// open counts the rows not closed yet.
	open int
}

var dataColumns = []chatstream.DataColumn{
	{Name: "id", ColumnType: "number"}, {Name: "name", ColumnType: "string"}, {Name: "half", ColumnType: "number"},
	{Name: "even", ColumnType: "boolean"}, {Name: "nothing", ColumnType: "string"},
}

func (f *fakeSource) QueryData(ctx context.Context, t chatstream.Turn, q string, timeout time.Duration) (chatstream.DataRows, error) {
	f.mu.Lock()
	f.turns = append(f.turns, t)
	f.timeout = timeout
	f.mu.Unlock()
	if b := t.ActiveBranchName; b != "" && !slices.Contains(t.Branches, b) {
		return nil, &chatstream.QueryError{Msg: fmt.Sprintf("branch %q not found", b)}
	}
	rows := &fakeRows{ctx: ctx, src: f, fail: -1, wait: -1, ragged: -1}
	switch f := strings.Fields(q); {
	case q == "refuse":
		return nil, &chatstream.QueryError{Msg: "only a single read-only SELECT statement is allowed"}
	case q == "boom":
		return nil, errors.New("dial tcp 10.1.2.3:5432: connection refused")
	case q == "stall":
		<-ctx.Done()
		return nil, ctx.Err()
	case q == "stall wrapped":
		<-ctx.Done()
		return nil, fmt.Errorf("run query: %w", ctx.Err())
	case q == "unanswered":
		<-ctx.Done()
		return nil, fmt.Errorf("connect: %w: %w", chatstream.ErrSourceUnavailable, ctx.Err())
	case q == "hostile":
		rows.hostile, rows.n = true, 1
	case q == "typed":
		rows.typed, rows.n = true, 1
	case len(f) >= 2 && f[0] == "rows":
		rows.n, _ = strconv.Atoi(f[1])
		if len(f) == 4 {
			k, _ := strconv.Atoi(f[3])
			switch f[2] {
			case "fail":
				rows.fail = k
			case "ragged":
				rows.ragged, rows.extra = k, 1
			case "short":
				rows.ragged, rows.extra = k, -1
			default:
				rows.wait = k
			}
		}
	default:
		return nil, &chatstream.QueryError{Msg: "the query is not valid SQL"}
	}
	f.mu.Lock()
	f.open++
	f.mu.Unlock()
	return rows, nil
}

func (f *fakeSource) lastTurn() chatstream.Turn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.turns[len(f.turns)-1]
}

func (f *fakeSource) openRows() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

// hostileValues are the values of the hostile query's columns.
var hostileValues = []any{
	"a,b", `say "hi"`, "line\nbreak\r\n", "=HYPERLINK(\"http://evil.example/\",\"x\")", "+1", "-2", "@SUM(A1)", "\ttab",
	"bad\xffutf8", "sep\u2028\u2029", "</script><script>", "\x00\x01", math.NaN(), math.Inf(1), math.Inf(-1),
	1e21, 1e-7, -0.5, int64(math.MaxInt64), int64(math.MinInt64), true, nil, "",
	"Total;=WEBSERVICE(A2&B2)", "tab\t=1|=2",
	json.Number("123456789012345678901234567890.120"), json.Number("=1+1"), // a JSON number, a text that is not one
}

// cents is a host's own numeric type: a type defined on int64.
type cents int64

// goValues are the values of the typed query: numbers of every Go integer
// and float type, and times, as a host's own DataSource may give them.
var goValues = []any{
	int(-1), int8(-8), int16(-16), int32(-32), int64(-64),
	uint(1), uint8(8), uint16(16), uint32(32), uint64(math.MaxUint64), uintptr(7),
	float32(0.1), float32(1e-7), float32(math.Inf(-1)), float64(2.5), cents(1999),
	time.Date(2024, 3, 5, 14, 7, 9, 123456789, time.FixedZone("CET", 3600)),
	time.Date(2024, 3, 5, 14, 7, 9, 0, time.UTC),
}

// goColumns are the typed query's columns.
var goColumns = func() []chatstream.DataColumn {
	cols := make([]chatstream.DataColumn, len(goValues))
	for i, v := range goValues {
		cols[i] = chatstream.DataColumn{Name: fmt.Sprintf("c%d", i), ColumnType: "number"}
		if _, ok := v.(time.Time); ok {
			cols[i].ColumnType = "time"
		}
	}
	return cols
}()

type fakeRows struct {
	ctx        context.Context
	src        *fakeSource
	n, i       int
	fail, wait int
	// ragged is the row that holds extra values more than the columns.
	ragged, extra int
	hostile       bool
	typed         bool
	vals          []any
	err           error
	closed        bool
}

func (r *fakeRows) Columns() []chatstream.DataColumn {
	if r.typed {
		return goColumns
	}
	if r.hostile {
		cols := make([]chatstream.DataColumn, len(hostileValues))
		for i := range cols {
			cols[i] = chatstream.DataColumn{Name: fmt.Sprintf("c%d", i), ColumnType: "string"}
		}
		cols[0].Name = "=cmd|' /C calc'!A0" // a hostile column name
		for i, v := range hostileValues {
			switch v.(type) {
			case float64, json.Number:
				cols[i].ColumnType = "number"
			}
		}
		return cols
	}
	return dataColumns
}

func (r *fakeRows) Next() bool {
	if r.err != nil || r.closed || r.i >= r.n {
		return false
	}
	if r.i == r.fail {
		r.err = &chatstream.QueryError{Msg: "the query ran longer than 5s and was stopped"}
		return false
	}
	if r.i == r.wait {
		<-r.ctx.Done()
		r.err = r.ctx.Err()
		return false
	}
	switch {
	case r.hostile:
		r.vals = hostileValues
	case r.typed:
		r.vals = goValues
	default:
		r.vals = []any{int64(r.i), fmt.Sprintf("name %d", r.i), float64(r.i) / 2, r.i%2 == 0, nil}
		if r.i == r.ragged {
			if r.extra > 0 {
				r.vals = append(r.vals, "extra")
			} else {
				r.vals = r.vals[:len(r.vals)-1]
			}
		}
	}
	r.i++
	return true
}

func (r *fakeRows) Values() []any { return r.vals }
func (r *fakeRows) Err() error    { return r.err }
func (r *fakeRows) Close() error {
	if !r.closed {
		r.closed = true
		r.src.mu.Lock()
		r.src.open--
		r.src.mu.Unlock()
	}
	return nil
}

// dataAgent is the test scripts with src as the data source of agent 7;
// agent 8 has none.
type dataAgent struct {
	chatstream.Agent
	src chatstream.DataSource
}

func (a dataAgent) DataSource(accountName, agentID string) chatstream.DataSource {
	if accountName == acct && agentID == agentID7 {
		return a.src
	}
	return nil
}

const (
	agentID7 = "7"
	agent8   = "8" // an agent without a data source
)

func newDataEnv(t testing.TB, tg apitest.Target, src *fakeSource, opts ...chatstream.Option) *env {
	return newEnv(t, tg, envOpts{agent: dataAgent{testScripts(), src}, opts: opts, cfg: func(c *operator.Config) {
		c.Accounts[0].Agents = append(c.Accounts[0].Agents, operator.Agent{ID: agent8, DeploymentID: 1})
	}})
}

func dataPath(account, agent string) string {
	return "/api/v1/public/" + account + "/agents/" + agent + "/sql"
}

// dataResponse is a data query answer read whole.
type dataResponse struct {
	resp  *http.Response
	lines []map[string]any
	raw   []byte
	err   error // reading the body
}

// postData posts body to the data query API with auth (an Authorization
// header value, or "" for none) and accept, and reads the whole answer.
func postData(t testing.TB, e *env, auth, accept string, body any) dataResponse {
	t.Helper()
	req := e.Request(t, http.MethodPost, dataPath(acct, agentID7), "", body)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := e.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, rerr := io.ReadAll(resp.Body)
	out := dataResponse{resp: resp, raw: raw, err: rerr}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
		return out
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", sc.Bytes(), err)
		}
		out.lines = append(out.lines, m)
	}
	return out
}

const adminAuth = "Api-Key " + apitest.AdminKey

func dataBody(q string) map[string]any {
	return map[string]any{"sqlQuery": q, "sessionSettings": map[string]any{"externalId": "data-user",
		"userAttributes": []any{map[string]any{"name": "country", "value": "Germany"}}}}
}

// TestDataQueryStreams checks the NDJSON answer: the schema line, data
// lines of at most 1,000 rows, the totalRows line, the values as sent, and
// the user and branch the source ran the query for.
func TestDataQueryStreams(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		src := &fakeSource{}
		e := newDataEnv(t, tg, src)
		body := dataBody("rows 2500")
		body["activeBranchName"] = "dev-1"
		r := postData(t, e, adminAuth, "", body)
		if r.resp.StatusCode != 200 || r.resp.Header.Get("Content-Type") != chatstream.ContentType {
			t.Fatalf("status %d, Content-Type %q: %s", r.resp.StatusCode, r.resp.Header.Get("Content-Type"), r.raw)
		}
		if got, _, _ := strings.Cut(string(r.raw), "\n"); got != jsonOf(t, map[string]any{"schema": dataColumns}) {
			t.Errorf("schema line = %s", got)
		}
		var sizes []int
		n := 0
		for _, l := range r.lines[1 : len(r.lines)-1] {
			rows := l["data"].([]any)
			sizes = append(sizes, len(rows))
			for _, row := range rows {
				want := fmt.Sprintf(`[%d,"name %d",%v,%v,null]`, n, n, float64(n)/2, n%2 == 0)
				if got := jsonOf(t, row); got != want {
					t.Fatalf("row %d = %s, want %s", n, got, want)
				}
				n++
			}
		}
		if !slices.Equal(sizes, []int{1000, 1000, 500}) {
			t.Errorf("data lines of %v rows, want [1000 1000 500]", sizes)
		}
		if got := jsonOf(t, r.lines[len(r.lines)-1]); got != `{"totalRows":2500}` {
			t.Errorf("last line = %s", got)
		}
		tu := src.lastTurn()
		if tu.User.ExternalID != "data-user" || tu.User.Attributes["country"] != "Germany" || tu.AccountName != acct ||
			tu.AgentID != agentID7 || tu.ActiveBranchName != "dev-1" || tu.IsDefaultBranch || !slices.Contains(tu.Branches, "dev-1") {
			t.Errorf("the source ran for %+v", tu)
		}
		if src.timeout != chatstream.DefaultDataTimeout {
			t.Errorf("timeout = %v, want %v", src.timeout, chatstream.DefaultDataTimeout)
		}
		// The user is provisioned as a chat turn provisions it.
		if u := e.User(t, acct, "data-user", ""); u.Attributes["country"] != `"Germany"` {
			t.Errorf("stored attributes = %v", u.Attributes)
		}
		// No rows: the schema and totalRows 0.
		r = postData(t, e, adminAuth, "", dataBody("rows 0"))
		if len(r.lines) != 2 || jsonOf(t, r.lines[1]) != `{"totalRows":0}` {
			t.Errorf("empty result = %s", r.raw)
		}
		if n := src.openRows(); n != 0 {
			t.Errorf("%d rows left open", n)
		}
	})
}

// TestDataQueryRowCap checks the handler's row cap: a longer result ends
// with truncated, one exactly as long does not.
func TestDataQueryRowCap(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		src := &fakeSource{}
		e := newDataEnv(t, tg, src, chatstream.WithDataRowLimit(1500))
		r := postData(t, e, adminAuth, "", dataBody("rows 2500"))
		if got := jsonOf(t, r.lines[len(r.lines)-1]); got != `{"totalRows":1500,"truncated":true}` {
			t.Errorf("capped: last line = %s", got)
		}
		r = postData(t, e, adminAuth, "", dataBody("rows 1500"))
		if got := jsonOf(t, r.lines[len(r.lines)-1]); got != `{"totalRows":1500}` {
			t.Errorf("exactly the cap: last line = %s", got)
		}
		r = postData(t, e, adminAuth, "text/csv", dataBody("rows 2500"))
		if got := r.resp.Trailer.Get(chatstream.TrailerTruncated); got != "true" {
			t.Errorf("CSV capped: %s = %q", chatstream.TrailerTruncated, got)
		}
		if got := r.resp.Trailer.Get(chatstream.TrailerTotalRows); got != "1500" {
			t.Errorf("CSV capped: %s = %q", chatstream.TrailerTotalRows, got)
		}
	})
}

// TestDataQueryErrors checks the answers before the first row: each a
// JSON error with its status, and nothing streamed.
func TestDataQueryErrors(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		src := &fakeSource{}
		log := new(logbuf.Buffer)
		logger := slog.New(slog.NewTextHandler(log, nil))
		e := newDataEnv(t, tg, src, chatstream.WithLogger(logger), chatstream.WithDataTimeout(300*time.Millisecond))
		settings := map[string]any{"externalId": "data-user"}
		cases := []struct {
			name, path, auth string
			body             any
			status           int
			msg              string
		}{
			{"refused query", "", adminAuth, dataBody("refuse"), 400, "only a single read-only SELECT statement is allowed"},
			{"unknown branch", "", adminAuth, map[string]any{"sqlQuery": "rows 1", "sessionSettings": settings, "activeBranchName": "nope"}, 400, `branch "nope" not found`},
			{"no first row in time", "", adminAuth, dataBody("stall"), 400, "the query ran longer than 300ms and was stopped"},
			{"no first row in time, the error wrapped", "", adminAuth, dataBody("stall wrapped"), 400, "the query ran longer than 300ms and was stopped"},
			{"the database did not answer in time", "", adminAuth, dataBody("unanswered"), 503, "the data source is temporarily unavailable"},
			{"source fault", "", adminAuth, dataBody("boom"), 503, "the data source is temporarily unavailable"},
			{"no sqlQuery", "", adminAuth, map[string]any{"sessionSettings": settings}, 400, "sqlQuery is required"},
			{"blank sqlQuery", "", adminAuth, map[string]any{"sqlQuery": "  \n", "sessionSettings": settings}, 400, "sqlQuery is required"},
			{"sqlQuery not a string", "", adminAuth, map[string]any{"sqlQuery": 1, "sessionSettings": settings}, 400, "sqlQuery"},
			{"no sessionSettings", "", adminAuth, map[string]any{"sqlQuery": "rows 1"}, 400, "sessionSettings is required"},
			{"bad externalId", "", adminAuth, map[string]any{"sqlQuery": "rows 1", "sessionSettings": map[string]any{"externalId": "Has Spaces"}}, 400, "sessionSettings.externalId"},
			{"branch too long", "", adminAuth, map[string]any{"sqlQuery": "rows 1", "sessionSettings": settings, "activeBranchName": strings.Repeat("b", 256)}, 400, "activeBranchName must be at most 255 characters"},
			{"roles with internalId", "", adminAuth, map[string]any{"sqlQuery": "rows 1", "sessionSettings": map[string]any{"internalId": apitest.InternalUser, "roles": []string{"x"}}}, 400, "sessionSettings.roles"},
			{"malformed JSON", "", adminAuth, `{"sqlQuery":`, 400, ""},
			{"unknown agent", dataPath(acct, "nope"), adminAuth, dataBody("rows 1"), 404, "agent not found"},
			{"agent without a data source", dataPath(acct, agent8), adminAuth, dataBody("rows 1"), 404, "agent has no data source"},
			{"unknown account", dataPath("nobody", agentID7), adminAuth, dataBody("rows 1"), 404, "account not found"},
			{"other account's key", "", "Api-Key " + apitest.OtherAdminKey, dataBody("rows 1"), 401, ""},
			{"no credentials", "", "", dataBody("rows 1"), 401, "missing credentials"},
			{"bad key", "", "Api-Key sk-nope", dataBody("rows 1"), 401, ""},
		}
		for _, c := range cases {
			path := c.path
			if path == "" {
				path = dataPath(acct, agentID7)
			}
			req := e.Request(t, http.MethodPost, path, "", c.body)
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			r := e.Send(t, req)
			msg, _ := r.Body["error"].(string)
			if r.Status != c.status || !strings.Contains(msg, c.msg) || r.Header.Get("Content-Type") != "application/json" ||
				strings.Contains(string(r.Raw), "10.1.2.3") {
				t.Errorf("%s: %d %s (%s), want %d %q", c.name, r.Status, r.Raw, r.Header.Get("Content-Type"), c.status, c.msg)
			}
		}
		// The source's fault is logged for the operator, never answered;
		// the credentials are in neither.
		if l := log.String(); !strings.Contains(l, "connection refused") || strings.Contains(l, apitest.AdminKey) {
			t.Errorf("log:\n%s", l)
		}
		if n := src.openRows(); n != 0 {
			t.Errorf("%d rows left open", n)
		}
		// A handler whose agent is no DataAgent: 404 for every agent.
		plain := newEnv(t, tg, envOpts{})
		if status, out := plain.Do(t, http.MethodPost, dataPath(acct, agentID7), apitest.AdminKey, dataBody("rows 1")); status != 404 || out["error"] != "agent has no data source" {
			t.Errorf("agent without DataSource method: %d %v", status, out)
		}
		e.ExpectInvalidText(t, dataPath(acct, agentID7), []apitest.TextField{
			{Name: "sqlQuery", Body: `{"sqlQuery":"BAD","sessionSettings":{"externalId":"x"}}`},
			{Name: "activeBranchName", Body: `{"sqlQuery":"rows 1","activeBranchName":"BAD","sessionSettings":{"externalId":"x"}}`},
			{Name: "sessionSettings.externalId", Body: `{"sqlQuery":"rows 1","sessionSettings":{"externalId":"BAD"}}`},
		})
	})
}

// TestDataQueryFailsAfterFirstRow checks an error once rows were sent: a
// last {"error"} line in NDJSON (no totalRows), and in CSV a response cut
// without its last chunk, which no HTTP client reads as complete.
func TestDataQueryFailsAfterFirstRow(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		src := &fakeSource{}
		e := newDataEnv(t, tg, src, chatstream.WithDataTimeout(300*time.Millisecond))
		r := postData(t, e, adminAuth, "", dataBody("rows 2500 fail 1200"))
		if r.resp.StatusCode != 200 || r.err != nil {
			t.Fatalf("status %d, read error %v", r.resp.StatusCode, r.err)
		}
		last := jsonOf(t, r.lines[len(r.lines)-1])
		if last != `{"error":"the query ran longer than 5s and was stopped"}` {
			t.Errorf("last line = %s", last)
		}
		// Running out of the handler's time while streaming.
		r = postData(t, e, adminAuth, "", dataBody("rows 2500 wait 10"))
		if last := jsonOf(t, r.lines[len(r.lines)-1]); last != `{"error":"the query ran longer than 300ms and was stopped"}` {
			t.Errorf("timed out: last line = %s", last)
		}

		r = postData(t, e, adminAuth, "text/csv", dataBody("rows 2500 fail 1200"))
		if r.resp.StatusCode != 200 || !errors.Is(r.err, io.ErrUnexpectedEOF) {
			t.Errorf("CSV cut: status %d, read error %v, want io.ErrUnexpectedEOF", r.resp.StatusCode, r.err)
		}
		if got := r.resp.Trailer.Get(chatstream.TrailerTotalRows); got != "" {
			t.Errorf("CSV cut: trailer %s = %q", chatstream.TrailerTotalRows, got)
		}
		if n := strings.Count(string(r.raw), "\r\n"); n < 2 || n > 1201 {
			t.Errorf("CSV cut after %d records", n)
		}
		// The client says so too.
		res, err := e.dataClient(adminAuth).QueryData(t.Context(), acct, agentID7, dataRequest("rows 2500 fail 1200"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		var rerr error
		for _, err := range res.Rows() {
			if err != nil {
				rerr = err
				break
			}
			n++
		}
		if qe, ok := errors.AsType[*chatstream.QueryError](rerr); !ok || n != 1200 || qe.Msg != "the query ran longer than 5s and was stopped" {
			t.Errorf("client: %d rows, then %v", n, rerr)
		}
		if n := src.openRows(); n != 0 {
			t.Errorf("%d rows left open", n)
		}
	})
}

// TestDataQueryGoValues: a host's own DataSource may give a number as any
// Go integer or float type (or one defined on them) and a time as a
// time.Time. Numbers are JSON numbers, unquoted in CSV as int64 and
// float64 are, a float32 at its own precision (0.1, not
// 0.10000000149011612); a time is RFC 3339 in UTC with nine digits of
// nanoseconds, a string in both forms.
func TestDataQueryGoValues(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newDataEnv(t, tg, &fakeSource{})
		const want = `[-1,-8,-16,-32,-64,1,8,16,32,18446744073709551615,7,0.1,1e-7,"-Infinity",2.5,1999,` +
			`"2024-03-05T13:07:09.123456789Z","2024-03-05T14:07:09.000000000Z"]`
		r := postData(t, e, adminAuth, "", dataBody("typed"))
		if r.resp.StatusCode != 200 || len(r.lines) != 3 {
			t.Fatalf("status %d:\n%s", r.resp.StatusCode, r.raw)
		}
		if got := strings.Split(string(r.raw), "\n")[1]; got != `{"data":[`+want+`]}` {
			t.Errorf("data line = %s\nwant        {\"data\":[%s]}", got, want)
		}

		r = postData(t, e, adminAuth, "text/csv", dataBody("typed"))
		records := strings.Split(string(r.raw), "\r\n")
		if r.resp.StatusCode != 200 || len(records) != 3 {
			t.Fatalf("CSV: status %d:\n%s", r.resp.StatusCode, r.raw)
		}
		const wantCSV = `-1,-8,-16,-32,-64,1,8,16,32,18446744073709551615,7,0.1,1e-7,-Infinity,2.5,1999,` +
			`"2024-03-05T13:07:09.123456789Z","2024-03-05T14:07:09.000000000Z"`
		if records[1] != wantCSV {
			t.Errorf("CSV record = %s\nwant         %s", records[1], wantCSV)
		}
		// The time reads back as the instant the source gave.
		res, err := e.dataClient(adminAuth).QueryData(t.Context(), acct, agentID7, dataRequest("typed"))
		if err != nil {
			t.Fatal(err)
		}
		for row, err := range res.Rows() {
			if err != nil {
				t.Fatal(err)
			}
			s, _ := row[16].(string)
			if got, err := time.Parse(time.RFC3339Nano, s); err != nil || !got.Equal(goValues[16].(time.Time)) {
				t.Errorf("time %q: %v, %v", s, got, err)
			}
		}
	})
}

// TestDataQueryRowLength: a row of a host's DataSource with more or fewer
// values than its columns is a fault of the source. It ends the stream
// as a fault after the first row does (the error line in NDJSON, a cut
// file in CSV), whether it is the first row or a later one, rather than
// writing values under the wrong columns; the rows sent before it stand.
func TestDataQueryRowLength(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		src := &fakeSource{}
		log := new(logbuf.Buffer)
		e := newDataEnv(t, tg, src, chatstream.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
		for _, q := range []string{"rows 5 ragged 3", "rows 5 short 3", "rows 5 ragged 0"} {
			sent := int(q[len(q)-1] - '0')
			r := postData(t, e, adminAuth, "", dataBody(q))
			if r.resp.StatusCode != 200 || r.err != nil {
				t.Fatalf("%s: status %d, read error %v", q, r.resp.StatusCode, r.err)
			}
			n := 0
			for _, l := range r.lines {
				if d, ok := l["data"].([]any); ok {
					n += len(d)
				}
			}
			if last := jsonOf(t, r.lines[len(r.lines)-1]); last != `{"error":"the query failed"}` || n != sent {
				t.Errorf("%s: %d rows, then %s; want %d rows, then the error line", q, n, last, sent)
			}

			r = postData(t, e, adminAuth, "text/csv", dataBody(q))
			if r.resp.StatusCode != 200 || !errors.Is(r.err, io.ErrUnexpectedEOF) {
				t.Errorf("%s: CSV: status %d, read error %v, want io.ErrUnexpectedEOF", q, r.resp.StatusCode, r.err)
			}
			if got := strings.Count(string(r.raw), "\r\n"); got != 1+sent || strings.Contains(string(r.raw), "extra") {
				t.Errorf("%s: CSV of %d records, want the header and %d rows:\n%s", q, got, sent, r.raw)
			}
		}
		if !strings.Contains(log.String(), "row 4 with 6 values for 5 columns") {
			t.Errorf("the fault is not logged:\n%s", log.String())
		}
		if n := src.openRows(); n != 0 {
			t.Errorf("%d rows left open", n)
		}
	})
}

// TestDataQueryCSV checks the CSV answer: headers, RFC 4180 records with a
// header row, hostile text quoted and kept from becoming a formula, and
// the trailers.
func TestDataQueryCSV(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newDataEnv(t, tg, &fakeSource{})
		r := postData(t, e, adminAuth, "application/json;q=0.5, text/csv", dataBody("rows 2500"))
		h := r.resp.Header
		if r.resp.StatusCode != 200 || h.Get("Content-Type") != "text/csv; charset=utf-8" ||
			h.Get("Content-Disposition") != `attachment; filename="result.csv"` || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("%d %v", r.resp.StatusCode, h)
		}
		if got := r.resp.Trailer.Get(chatstream.TrailerTotalRows); got != "2500" {
			t.Errorf("%s = %q", chatstream.TrailerTotalRows, got)
		}
		if got := r.resp.Trailer.Get(chatstream.TrailerTruncated); got != "false" {
			t.Errorf("%s = %q", chatstream.TrailerTruncated, got)
		}
		if !strings.HasSuffix(string(r.raw), "\r\n") || strings.Count(string(r.raw), "\r\n") != 2501 {
			t.Errorf("want 2501 CRLF-ended records")
		}
		recs, err := csv.NewReader(strings.NewReader(string(r.raw))).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(recs[0], ","); got != "id,name,half,even,nothing" {
			t.Errorf("header = %q", got)
		}
		if got := strings.Join(recs[8], "|"); got != "7|name 7|3.5|false|" {
			t.Errorf("row 7 = %q", got)
		}

		// The Accept header's qualities decide.
		for accept, csv := range map[string]bool{
			"text/csv": true, "text/csv, */*": true, "application/x-ndjson;q=0.5, text/csv;q=0.6": true,
			"text/csv;q=x": true, "text/csv;q=NaN": true, "text/csv, application/x-ndjson;q=0.99": true, "TEXT/CSV": true, "text/*": true, "application/json, text/csv;q=0.9": true,
			"text/csv;q=0.5, application/x-ndjson;q=0, */*": true, // the more specific range wins
			"*/*, text/csv;q=0.5":                           false, "application/*;q=0.4, text/csv;q=0.3": false, "text/csv;q=0": false,
			"text/*;q=0.5, text/csv;q=0, */*": false, "": false, "application/x-ndjson": false, "application/json": false,
			"*/*": false, "application/json, text/plain, */*": false, // curl, fetch: the default
			"application/x-ndjson, text/csv": false, "text/csv, application/x-ndjson;q=NaN": false, // a tie of equal ranges: the default
		} {
			r := postData(t, e, adminAuth, accept, dataBody("rows 2"))
			if got := r.resp.Header.Get("Content-Type") == chatstream.CSVContentType; r.resp.StatusCode != 200 || got != csv {
				t.Errorf("Accept %q: %d %q, want CSV %v", accept, r.resp.StatusCode, r.resp.Header.Get("Content-Type"), csv)
			}
		}

		r = postData(t, e, adminAuth, "text/csv", dataBody("hostile"))
		recs, err = csv.NewReader(strings.NewReader(string(r.raw))).ReadAll()
		if err != nil || len(recs) != 2 {
			t.Fatalf("hostile CSV: %v, %d records:\n%s", err, len(recs), r.raw)
		}
		want := []string{"a,b", `say "hi"`, "line\nbreak\n", `'=HYPERLINK("http://evil.example/","x")`, "'+1", "'-2", "'@SUM(A1)", "'\ttab",
			"bad\uFFFDutf8", "sep\u2028\u2029", "</script><script>", "\x00\x01", "NaN", "Infinity", "-Infinity",
			"1e+21", "1e-7", "-0.5", "9223372036854775807", "-9223372036854775808", "true", "", "",
			"Total;=WEBSERVICE(A2&B2)", "tab\t=1|=2", "123456789012345678901234567890.120", "'=1+1"}
		// encoding/csv reads a quoted \r\n as \n.
		for i, w := range want {
			if recs[1][i] != w {
				t.Errorf("hostile value %d = %q, want %q", i, recs[1][i], w)
			}
		}
		if recs[0][0] != "'=cmd|' /C calc'!A0" {
			t.Errorf("hostile column name = %q", recs[0][0])
		}
		// Every text is quoted, so that no separator a spreadsheet may
		// take (";" in many locales, a tab, "|") splits it into a cell
		// that starts a formula; numbers, booleans and nulls are not.
		body := string(r.raw)
		for _, field := range []string{`"Total;=WEBSERVICE(A2&B2)"`, "\"tab\t=1|=2\"", `,"",`, `"sep` + "\u2028\u2029" + `"`,
			",NaN,Infinity,-Infinity,1e+21,1e-7,-0.5,9223372036854775807,-9223372036854775808,true,,",
			`,123456789012345678901234567890.120,"'=1+1"` + "\r\n"} {
			if !strings.Contains(body, field) {
				t.Errorf("hostile CSV lacks %q:\n%s", field, body)
			}
		}
	})
}

// TestDataQueryHostileJSON checks that values that need escaping arrive
// intact in NDJSON, and through the client with their types.
func TestDataQueryHostileJSON(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newDataEnv(t, tg, &fakeSource{})
		res, err := e.dataClient(adminAuth).QueryData(t.Context(), acct, agentID7, dataRequest("hostile"))
		if err != nil {
			t.Fatal(err)
		}
		var rows [][]any
		for row, err := range res.Rows() {
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, row)
		}
		if len(rows) != 1 || res.TotalRows != 1 || res.Truncated {
			t.Fatalf("%d rows, totalRows %d, truncated %v", len(rows), res.TotalRows, res.Truncated)
		}
		for i, want := range hostileValues {
			got := rows[0][i]
			switch w := want.(type) {
			case string:
				w = strings.ToValidUTF8(w, "\uFFFD")
				if got != w {
					t.Errorf("value %d = %#v, want %#v", i, got, w)
				}
			case float64:
				g, ok := got.(float64)
				if i, isInt := got.(int64); isInt {
					g, ok = float64(i), true
				}
				if !ok || !(g == w || math.IsNaN(g) && math.IsNaN(w)) {
					t.Errorf("value %d = %#v, want %v", i, got, w)
				}
			case json.Number:
				// Exact when it is a number; a text that is not one
				// arrives as a string.
				var exp any = w
				if _, err := w.Float64(); err != nil {
					exp = string(w)
				}
				if got != exp {
					t.Errorf("value %d = %#v, want %#v", i, got, exp)
				}
			default:
				if got != want {
					t.Errorf("value %d = %#v, want %#v", i, got, want)
				}
			}
		}
	})
}

// TestDataQueryBearer checks the embed session token: the token's user,
// sessionSettings optional and, when sent, naming that user.
func TestDataQueryBearer(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		src := &fakeSource{}
		e := newDataEnv(t, tg, src)
		tok := e.Token(t, e.GenerateSession(t, map[string]any{"deploymentId": 1, "externalId": "tok-user",
			"userAttributes": []map[string]any{{"name": "country", "value": "Japan"}}}))
		auth := "Bearer " + tok
		r := postData(t, e, auth, "text/csv", map[string]any{"sqlQuery": "rows 3"})
		if r.resp.StatusCode != 200 || strings.Count(string(r.raw), "\r\n") != 4 {
			t.Fatalf("%d %s", r.resp.StatusCode, r.raw)
		}
		if u := src.lastTurn().User; u.ExternalID != "tok-user" || u.Attributes["country"] != "Japan" {
			t.Errorf("the source ran for %+v", u)
		}
		if r := postData(t, e, auth, "", map[string]any{"sqlQuery": "rows 1", "sessionSettings": map[string]any{"externalId": "tok-user"}}); r.resp.StatusCode != 200 {
			t.Errorf("matching sessionSettings: %d %s", r.resp.StatusCode, r.raw)
		}
		if r := postData(t, e, auth, "", map[string]any{"sqlQuery": "rows 1", "sessionSettings": map[string]any{"externalId": "someone-else"}}); r.resp.StatusCode != 403 {
			t.Errorf("another user's sessionSettings: %d %s, want 403", r.resp.StatusCode, r.raw)
		}
		if r := postData(t, e, "Bearer nope", "", map[string]any{"sqlQuery": "rows 1"}); r.resp.StatusCode != 401 {
			t.Errorf("bad token: %d, want 401", r.resp.StatusCode)
		}
		if strings.Contains(string(r.raw), tok) {
			t.Error("the token is in the answer")
		}
	})
}

// TestDataQueryStreamsBeforeTheEnd checks that rows are sent as the query
// yields them, not collected: the client has read the first rows while
// the query has not produced the rest.
func TestDataQueryStreamsBeforeTheEnd(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		src := &fakeSource{}
		e := newDataEnv(t, tg, src)
		ctx, cancel := context.WithCancel(t.Context())
		res, err := e.dataClient(adminAuth).QueryData(ctx, acct, agentID7, dataRequest("rows 5000 wait 2000"))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Columns) != len(dataColumns) {
			t.Errorf("columns = %v", res.Columns)
		}
		n := 0
		for _, err := range res.Rows() {
			if err != nil {
				t.Fatal(err)
			}
			if n++; n == 2000 {
				break // the source waits at row 2000 until the request ends
			}
		}
		cancel()
		// Leaving the loop closed the response: the handler closes the rows.
		deadline := time.Now().Add(5 * time.Second)
		for src.openRows() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := src.openRows(); n != 0 {
			t.Errorf("%d rows left open after the client left", n)
		}
	})
}

// TestClientQueryData checks the client's iterator over a whole result
// and its errors before the first row.
func TestClientQueryData(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newDataEnv(t, tg, &fakeSource{}, chatstream.WithDataRowLimit(2000))
		c := e.dataClient(adminAuth)
		res, err := c.QueryData(t.Context(), acct, agentID7, dataRequest("rows 2500"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for row, err := range res.Rows() {
			if err != nil {
				t.Fatal(err)
			}
			if row[0] != int64(n) || row[1] != fmt.Sprintf("name %d", n) {
				t.Fatalf("row %d = %v", n, row)
			}
			n++
		}
		if n != 2000 || res.TotalRows != 2000 || !res.Truncated {
			t.Errorf("%d rows, totalRows %d, truncated %v", n, res.TotalRows, res.Truncated)
		}
		if _, err := c.QueryData(t.Context(), acct, agentID7, dataRequest("refuse")); apiStatus(err) != 400 ||
			!strings.Contains(err.Error(), "only a single read-only SELECT") {
			t.Errorf("refused query: %v", err)
		}
		if _, err := c.QueryData(t.Context(), acct, agent8, dataRequest("rows 1")); apiStatus(err) != 404 {
			t.Errorf("agent without data source: %v", err)
		}
		if _, err := c.QueryData(t.Context(), acct, agentID7, chatstream.DataRequest{SQLQuery: "rows 1\xff",
			SessionSettings: ext("x")}); err == nil || !strings.Contains(err.Error(), "sqlQuery must be valid UTF-8") {
			t.Errorf("invalid UTF-8 sent: %v", err)
		}
	})
}

func dataRequest(q string) chatstream.DataRequest {
	return chatstream.DataRequest{SQLQuery: q, SessionSettings: ext("data-user")}
}

// dataClient is a client authenticating with auth (an Authorization
// header value).
func (e *env) dataClient(auth string) *chatstream.Client {
	opt := chatstream.WithBearerToken(strings.TrimPrefix(auth, "Bearer "))
	if key, ok := strings.CutPrefix(auth, "Api-Key "); ok {
		opt = chatstream.WithAPIKey(key)
	}
	return chatstream.NewClient(e.URL, opt, chatstream.WithHTTPClient(e.Client()))
}

// TestDataQueryLimits: data queries running at once are bounded per user
// and per account by the running-turn limits (counted apart from the
// turns), with the 429 and Retry-After of those limits; one that ends frees
// its place.
func TestDataQueryLimits(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		src := &fakeSource{}
		e := newDataEnv(t, tg, src, chatstream.WithDefaultLimits(store.Limits{RunningTurnsPerUser: 1, RunningTurns: 2}))
		body := func(user, q string) map[string]any {
			return map[string]any{"sqlQuery": q, "sessionSettings": map[string]any{"externalId": user}}
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		hold := func(user string) {
			wg.Go(func() {
				req := e.Request(t, http.MethodPost, dataPath(acct, agentID7), apitest.AdminKey, body(user, "rows 5 wait 1"))
				req = req.WithContext(ctx)
				if resp, err := e.Client().Do(req); err == nil {
					_, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
			})
		}
		hold("ann")
		hold("bob")
		waitFor(t, func() bool { return src.openRows() == 2 })
		for _, c := range []struct{ user, want string }{
			{"ann", "running query limit of 1 per user reached"},
			{"cid", "running query limit of 2 reached for this account"},
		} {
			r := postData(t, e, "Api-Key "+apitest.AdminKey, "", body(c.user, "rows 1"))
			if r.resp.StatusCode != http.StatusTooManyRequests || r.resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(r.raw), c.want) {
				t.Errorf("%s: %d %q %s, want 429 %q", c.user, r.resp.StatusCode, r.resp.Header.Get("Retry-After"), r.raw, c.want)
			}
		}
		cancel()
		wg.Wait()
		// The server's handlers end once they see the clients gone.
		waitFor(t, func() bool { return src.openRows() == 0 })
		var r dataResponse
		waitFor(t, func() bool {
			r = postData(t, e, "Api-Key "+apitest.AdminKey, "", body("ann", "rows 1"))
			return r.resp.StatusCode != http.StatusTooManyRequests
		})
		if r.resp.StatusCode != http.StatusOK {
			t.Errorf("after the queries ended: %d %s", r.resp.StatusCode, r.raw)
		}
	})
}
