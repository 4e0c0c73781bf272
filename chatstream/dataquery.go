package chatstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// DataPattern is the path of the data query API, with {accountName} and
// {agentId} wildcards (http.ServeMux and gorilla/mux syntax).
const DataPattern = "/api/v1/public/{accountName}/agents/{agentId}/sql"

// CSVContentType is the media type of a data query answered as CSV (the
// request's Accept header names text/csv).
const CSVContentType = "text/csv; charset=utf-8"

// Trailers of a data query answered as CSV: the rows sent, and whether the
// row cap cut the result ("true" or "false").
const (
	TrailerTotalRows = "Embedkit-Total-Rows"
	TrailerTruncated = "Embedkit-Truncated"
)

// DataAgent is an [Agent] whose tools read a [DataSource]: the handler's
// data query API (POST .../agents/{agentId}/sql) runs queries through the
// same source, so a host registers an agent's data once, where its agent
// gets its tools. [NewHandler] looks for this interface on the agent it is
// given.
type DataAgent interface {
	Agent
	// DataSource returns the data source of the agent agentID of account
	// accountName, or nil when that agent has none (the data query API
	// then answers 404 "agent has no data source").
	DataSource(accountName, agentID string) DataSource
}

// DataRequest is the body of a data query request. The handler decodes it
// and [Client.QueryData] sends it.
type DataRequest struct {
	// SQLQuery is the query to run, typically the sqlQuery of a svcSqlApi
	// tool result. Required.
	SQLQuery string `json:"sqlQuery"`
	// SessionSettings names the user whose row access applies, as in a
	// chat request: required with an API key; optional with a session
	// token, where it must name the token's user.
	SessionSettings *SessionSettings `json:"sessionSettings,omitempty"`
	// ActiveBranchName is the development branch to query instead of the
	// main branch, as in a chat request.
	ActiveBranchName string `json:"activeBranchName,omitempty"`
}

// decodeDataRequest decodes and validates a data query body; needSettings
// is true with an API key. Every error is a 4xx *wire.Error naming the
// field.
func decodeDataRequest(body []byte, needSettings bool) (DataRequest, error) {
	var req DataRequest
	if err := wire.Unmarshal(body, &req); err != nil {
		return DataRequest{}, err
	}
	if strings.TrimSpace(req.SQLQuery) == "" {
		return DataRequest{}, wire.BadRequest("sqlQuery is required")
	}
	if err := checkBranchName(req.ActiveBranchName); err != nil {
		return DataRequest{}, err
	}
	if err := validateSettings(req.SessionSettings, needSettings); err != nil {
		return DataRequest{}, err
	}
	if err := refuseRoles(body, req.SessionSettings); err != nil {
		return DataRequest{}, err
	}
	return req, nil
}

// checkText refuses a request holding a string that is not valid UTF-8
// before the client encodes it (see [Request.checkText]).
func (r *DataRequest) checkText() error {
	for _, f := range []struct{ name, v string }{{"sqlQuery", r.SQLQuery}, {"activeBranchName", r.ActiveBranchName}} {
		if !utf8.ValidString(f.v) {
			return wire.BadRequest("%s must be valid UTF-8", f.name)
		}
	}
	return r.SessionSettings.checkText()
}

var errNoDataSource = wire.Errorf(http.StatusNotFound, "agent has no data source")

// Sizes of the pieces a data query is streamed in: a data line (or a run of
// CSV records) holds at most dataBatchRows rows and is sent once it holds
// dataBatchBytes, so that memory stays flat whatever the rows hold.
const (
	dataBatchRows  = 1000
	dataBatchBytes = 256 << 10
)

// serveData answers the data query API: it runs the request's SQL with the
// agent's data source for the caller's user and streams the rows, as
// NDJSON or, when the request accepts text/csv, as CSV.
func (h *Handler) serveData(w http.ResponseWriter, r *http.Request) {
	c, req, err := admit(h, w, r, decodeDataRequest, func(q DataRequest) *SessionSettings { return q.SessionSettings })
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var ds DataSource
	if h.data != nil {
		ds = h.data.DataSource(c.acct.Name, c.agent.ID)
	}
	if ds == nil {
		h.fail(w, r, errNoDataSource)
		return
	}
	lim := h.cfg.limitsOf(c.acct)
	leave, err := h.queries.enter(c.acct.ID, dataQueryUser(c, req), TurnLimits{Account: max(lim.RunningTurns, 0), User: max(lim.RunningTurnsPerUser, 0)})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer leave()
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.dataTimeout)
	defer cancel()
	t, provisionUser, err := h.dataTurn(ctx, c, req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rows, err := ds.QueryData(ctx, t, req.SQLQuery, h.cfg.dataTimeout)
	if err != nil {
		h.fail(w, r, h.queryFailure(ctx, err))
		return
	}
	defer rows.Close()
	// The status waits for the first row (or the end): a query that fails
	// before it is a 4xx answer, not a stream that ends in an error.
	more := rows.Next()
	if !more {
		if err := rows.Err(); err != nil {
			h.fail(w, r, h.queryFailure(ctx, err))
			return
		}
	}
	// The query is accepted: now the request's user is stored.
	if err := provisionUser(); err != nil {
		h.fail(w, r, err)
		return
	}

	out := &dataStream{csv: acceptsCSV(r), lw: h.newLineWriter(r, w)}
	defer out.lw.end()
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	if out.csv {
		out.lw.contentType = CSVContentType
		hd.Set("Content-Disposition", `attachment; filename="result.csv"`)
		hd.Set("Trailer", TrailerTotalRows+", "+TrailerTruncated)
	}
	cols := rows.Columns()
	out.header(cols)
	if !out.send() {
		return
	}
	total, truncated := 0, false
	// ragged is the fault of a source whose row does not fit the columns:
	// written as it is, it would shift the values under the wrong names
	// (a CSV record longer than its header), so the stream ends there, as
	// on any fault of the source.
	var ragged error
	for ; more; more = rows.Next() {
		if total == h.cfg.dataRowLimit {
			truncated = true
			break
		}
		vals := rows.Values()
		if len(vals) != len(cols) {
			ragged = fmt.Errorf("chatstream: data query: the data source gave row %d with %d values for %d columns", total+1, len(vals), len(cols))
			break
		}
		out.row(vals)
		total++
		if out.rows == dataBatchRows || len(out.buf) >= dataBatchBytes {
			if !out.send() {
				return
			}
		}
	}
	err = ragged
	if err == nil && !truncated {
		err = rows.Err()
	}
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		status, msg := http.StatusInternalServerError, ""
		if ragged == nil {
			status, msg = wire.Status(h.queryFailure(ctx, err))
		}
		if status >= http.StatusInternalServerError {
			msg = "the query failed"
			if h.cfg.log != nil {
				h.cfg.log.LogAttrs(r.Context(), slog.LevelError, "data query failed while streaming", slog.String("error", err.Error()))
			}
		}
		if out.csv {
			// What was sent stays a cut file: the response ends without
			// its last chunk, so no client takes it for a whole one.
			out.send()
			panic(http.ErrAbortHandler)
		}
		out.fail(msg)
		out.send()
		return
	}
	if out.csv {
		if !out.send() {
			return
		}
		hd.Set(TrailerTotalRows, strconv.Itoa(total))
		hd.Set(TrailerTruncated, strconv.FormatBool(truncated))
		return
	}
	out.end(total, truncated)
	out.send()
}

// dataTurn describes the caller's user and branch as a turn does, for the
// data source: with an API key, the user of sessionSettings as a chat turn
// provisions it. A request is all or nothing, and a query may be refused:
// the user is provisioned in a transaction that is rolled back, to read
// what the query runs with, and stored by provisionUser once the query is
// accepted.
func (h *Handler) dataTurn(ctx context.Context, c caller, req DataRequest) (t Turn, provisionUser func() error, err error) {
	var (
		user store.User
		data store.UserData
	)
	provisionUser = func() error { return nil }
	if c.es != nil {
		user = c.es.User
		if data, err = h.st.UserData(ctx, user.ID, c.es.Session.Scope()); err != nil {
			return Turn{}, nil, err
		}
	} else {
		now := h.cfg.now()
		lim := h.cfg.limitsOf(c.acct)
		p := req.SessionSettings.provision(now, h.cfg.ephemeralTTL)
		p.MaxNewEphemeralPerMinute = lim.NewEphemeralUsersPerMinute
		err = h.st.InTx(ctx, func(tx store.Tx) error {
			res, err := provision.Apply(ctx, tx, c.acct, p, c.acct.ExternalUserLimit(), now)
			if err == nil {
				user = res.User
				data, err = tx.UserData(ctx, res.User.ID, res.Scope)
			}
			return cmp.Or(err, errDryRun)
		})
		if !errors.Is(err, errDryRun) {
			return Turn{}, nil, err
		}
		provisionUser = func() error {
			_, err := provision.Run(ctx, h.st, c.acct, p, now)
			return err
		}
	}
	return Turn{
		AccountName:      c.acct.Name,
		AgentID:          c.agent.ID,
		User:             turnUser(user, data),
		ActiveBranchName: req.ActiveBranchName,
		IsDefaultBranch:  req.ActiveBranchName == "",
		Branches:         c.acct.Branches,
		DeploymentID:     c.agent.DeploymentID,
	}, provisionUser, nil
}

// errDryRun rolls back the transaction in which dataTurn provisions a user
// to read it.
var errDryRun = errors.New("chatstream: dry run")

// queryFailure maps an error of a data source to the answer: a
// *[QueryError] is a 400 with its message, and so is any other error once
// the handler's time has run out (a source that hands back its context's
// error), unless it is [ErrSourceUnavailable]: a database that did not
// answer before the query was sent is not a query that ran long; the
// client going away is its own error; anything else is the source's
// fault, a database that cannot be reached or failed (503, its cause
// logged, never sent).
func (h *Handler) queryFailure(ctx context.Context, err error) error {
	if qe, ok := errors.AsType[*QueryError](err); ok {
		return wire.Errorf(http.StatusBadRequest, "%s", qe.Msg)
	}
	switch cerr := ctx.Err(); {
	case cerr != nil && !errors.Is(cerr, context.DeadlineExceeded):
		return cerr
	case cerr != nil && !errors.Is(err, ErrSourceUnavailable):
		return wire.Errorf(http.StatusBadRequest, "the query ran longer than %s and was stopped", h.cfg.dataTimeout)
	}
	return &wire.Error{Status: http.StatusServiceUnavailable, Message: "the data source is temporarily unavailable", Err: fmt.Errorf("chatstream: data query: %w", err)}
}

// acceptsCSV reports whether the request's Accept header prefers
// text/csv to application/x-ndjson (RFC 9110: each type takes the quality
// of the most specific range that names it, text/csv over text/* over
// */*): CSV when its quality is above 0 and above NDJSON's, or equal to it
// from a more specific range. Any other tie is NDJSON, the default, so
// that a client sending */* (curl, fetch) gets NDJSON. A quality that is
// not a number from 0 to 1 counts as 1; no Accept header is NDJSON.
func acceptsCSV(r *http.Request) bool {
	// Per type: the quality of the most specific range so far (2 exact, 1
	// type/*, 0 */*), and that specificity; -1: no range names it.
	csv, csvSpec := 0.0, -1
	nd, ndSpec := 0.0, -1
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if f, err := strconv.ParseFloat(params["q"], 64); err == nil && f >= 0 && f <= 1 { // NaN is neither
				q = f
			}
			if spec := rangeSpecificity(mt, "text/csv"); spec > csvSpec {
				csv, csvSpec = q, spec
			}
			if spec := rangeSpecificity(mt, "application/x-ndjson"); spec > ndSpec {
				nd, ndSpec = q, spec
			}
		}
	}
	return csv > 0 && (csv > nd || csv == nd && csvSpec > ndSpec)
}

// rangeSpecificity is how specifically the media range mr names the type
// t: 2 for t itself, 1 for its type/*, 0 for */*, -1 when it does not.
func rangeSpecificity(mr, t string) int {
	switch {
	case mr == t:
		return 2
	case mr == "*/*":
		return 0
	case strings.HasSuffix(mr, "/*") && strings.HasPrefix(t, mr[:len(mr)-1]):
		return 1
	}
	return -1
}

// dataStream encodes a data query's answer into buf, a batch at a time,
// and sends each batch through lw.
type dataStream struct {
	csv  bool
	lw   *lineWriter
	buf  []byte
	rows int // rows in the open data line (NDJSON)
	// number: the columns whose type is number (CSV), whose values a
	// source may give as text (a number beyond a float64's range).
	number []bool
}

// header writes the schema line, or the CSV header record.
func (s *dataStream) header(cols []DataColumn) {
	if s.csv {
		s.number = make([]bool, len(cols))
		for i, c := range cols {
			if i > 0 {
				s.buf = append(s.buf, ',')
			}
			s.buf = appendCSVField(s.buf, c.Name)
			s.number[i] = c.ColumnType == "number"
		}
		s.endRecord(len(cols))
		return
	}
	if cols == nil {
		cols = []DataColumn{}
	}
	line, err := encodeJSON(struct {
		Schema []DataColumn `json:"schema"`
	}{cols})
	if err != nil { // unreachable: names and types are strings
		line = []byte(`{"schema":[]}` + "\n")
	}
	s.buf = append(s.buf, line...)
}

// row adds one row to the batch.
func (s *dataStream) row(vals []any) {
	if s.csv {
		for i, v := range vals {
			if i > 0 {
				s.buf = append(s.buf, ',')
			}
			s.buf = appendCSVValue(s.buf, v, i < len(s.number) && s.number[i])
		}
		s.endRecord(len(vals))
		return
	}
	if s.rows == 0 {
		s.buf = append(s.buf, `{"data":[`...)
	} else {
		s.buf = append(s.buf, ',')
	}
	s.buf = append(s.buf, '[')
	for i, v := range vals {
		if i > 0 {
			s.buf = append(s.buf, ',')
		}
		s.buf = appendJSONValue(s.buf, v)
	}
	s.buf = append(s.buf, ']')
	s.rows++
}

// endRecord ends a CSV record of n fields. A record of one empty field
// is written as "" rather than as an empty line, which CSV readers skip.
func (s *dataStream) endRecord(n int) {
	if n == 1 && (len(s.buf) == 0 || s.buf[len(s.buf)-1] == '\n') {
		s.buf = append(s.buf, '"', '"')
	}
	s.buf = append(s.buf, '\r', '\n')
}

// closeLine ends the open data line, if any.
func (s *dataStream) closeLine() {
	if s.rows > 0 {
		s.buf = append(s.buf, "]}\n"...)
		s.rows = 0
	}
}

// end writes the totalRows line.
func (s *dataStream) end(total int, truncated bool) {
	s.closeLine()
	s.buf = append(s.buf, `{"totalRows":`...)
	s.buf = strconv.AppendInt(s.buf, int64(total), 10)
	if truncated {
		s.buf = append(s.buf, `,"truncated":true`...)
	}
	s.buf = append(s.buf, "}\n"...)
}

// fail writes the error line that ends a stream whose query failed.
func (s *dataStream) fail(msg string) {
	s.closeLine()
	line, err := encodeJSON(struct {
		Error string `json:"error"`
	}{msg})
	if err != nil { // unreachable: a string always encodes
		line = []byte(`{"error":"the query failed"}` + "\n")
	}
	s.buf = append(s.buf, line...)
}

// send writes and flushes the batch; false once the client is gone.
func (s *dataStream) send() bool {
	s.closeLine()
	ok := s.lw.write(s.buf) && s.lw.flush()
	s.buf = s.buf[:0]
	return ok
}

// appendJSONValue appends v, a value of [DataRows.Values], as JSON. A
// number that is not finite, which JSON cannot hold, is the string "NaN",
// "Infinity" or "-Infinity" (as PostgreSQL's to_json writes it); a
// time.Time is a string (see [appendTime]).
func appendJSONValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case string:
		return appendJSONString(b, x)
	case json.Number:
		if isJSONNumber(string(x)) {
			return append(b, x...)
		}
		return appendJSONString(b, string(x))
	case bool:
		return strconv.AppendBool(b, x)
	case time.Time:
		b = append(b, '"')
		b = appendTime(b, x)
		return append(b, '"')
	}
	if n, ok := numberOf(v); ok {
		if nb, finite := n.append(b); finite {
			return nb
		}
		return appendJSONString(b, nonFinite(n.f))
	}
	// Not a type of the DataRows contract: its text, rather than a broken
	// line.
	return appendJSONString(b, fmt.Sprint(v))
}

// number is a value of one of Go's integer or floating-point types, or of
// a type defined on one: a host's own source may hand int, int32, uint or
// float32 as readily as int64 and float64.
type number struct {
	kind byte // 'i', 'u' or 'f'
	i    int64
	u    uint64
	f    float64
	bits int // of a float: 32 or 64
}

// numberOf returns v as a number; ok is false when it is not one.
func numberOf(v any) (_ number, ok bool) {
	switch x := v.(type) {
	case int64:
		return number{kind: 'i', i: x}, true
	case float64:
		return number{kind: 'f', f: x, bits: 64}, true
	case int:
		return number{kind: 'i', i: int64(x)}, true
	case int32:
		return number{kind: 'i', i: int64(x)}, true
	case float32:
		return number{kind: 'f', f: float64(x), bits: 32}, true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return number{kind: 'i', i: rv.Int()}, true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return number{kind: 'u', u: rv.Uint()}, true
	case reflect.Float32:
		return number{kind: 'f', f: rv.Float(), bits: 32}, true
	case reflect.Float64:
		return number{kind: 'f', f: rv.Float(), bits: 64}, true
	}
	return number{}, false
}

// append appends n as JSON writes a number; finite is false, and nothing
// appended, for a float that is not finite (NaN, ±Inf), which no number
// can be written as.
func (n number) append(b []byte) (_ []byte, finite bool) {
	switch {
	case n.kind == 'i':
		return strconv.AppendInt(b, n.i, 10), true
	case n.kind == 'u':
		return strconv.AppendUint(b, n.u, 10), true
	case math.IsNaN(n.f) || math.IsInf(n.f, 0):
		return b, false
	}
	return appendFloat(b, n.f, n.bits), true
}

// dataTimeLayout is RFC 3339 with all nine digits of the nanoseconds,
// trailing zeros kept: every time is one width, so that a column of them
// sorts as its texts do (time.RFC3339Nano drops the zeros, and
// "09.5Z" sorts before "09Z").
const dataTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// appendTime appends t in UTC, whatever the source's location, so that
// one instant is one text, in [dataTimeLayout].
func appendTime(b []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(b, dataTimeLayout)
}

// isJSONNumber reports whether s is a number as JSON writes it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	digits := func(i int) int { // the end of the digits from i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i
	}
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(i)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		if j := digits(i + 1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if j := digits(i); j > i {
			i = j
		} else {
			return false
		}
	}
	return i == len(s)
}

// nonFinite names a NaN or an infinity.
func nonFinite(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case f > 0:
		return "Infinity"
	}
	return "-Infinity"
}

// appendFloat appends a finite f as encoding/json writes a float of bits
// (32 or 64) bits: the shortest decimal that reads back as f at that
// precision (a float32 0.1 is 0.1, not 0.10000000149011612), in exponent
// form only for very large or small magnitudes.
func appendFloat(b []byte, f float64, bits int) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// e-07 is e-7, as in encoding/json.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it without HTML escaping: invalid UTF-8 becomes U+FFFD, and
// U+2028 and U+2029 are escaped (JavaScript reads them as line ends).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendCSVValue appends v, a value of [DataRows.Values], as a CSV field:
// null is an empty field; numbers and booleans as in JSON, unquoted (a
// number that is not finite as NaN, Infinity or -Infinity); a time.Time
// as the text of the JSON form. In a column of numbers, a text that is a
// number (its digits beyond a float64's range) is written as a number: no
// formula is a number.
func appendCSVValue(b []byte, v any, number bool) []byte {
	switch x := v.(type) {
	case nil:
		return b
	case string:
		if number && isJSONNumber(x) {
			return append(b, x...)
		}
		return appendCSVField(b, x)
	case json.Number:
		if isJSONNumber(string(x)) {
			return append(b, x...)
		}
		return appendCSVField(b, string(x))
	case bool:
		return strconv.AppendBool(b, x)
	case time.Time:
		return appendCSVField(b, string(appendTime(nil, x)))
	}
	if n, ok := numberOf(v); ok {
		if nb, finite := n.append(b); finite {
			return nb
		}
		return append(b, nonFinite(n.f)...)
	}
	return appendCSVField(b, fmt.Sprint(v))
}

// appendCSVField appends a text field quoted, as RFC 4180 allows any
// field to be, with quotes doubled. Invalid UTF-8 becomes U+FFFD. A text
// is written by whoever controls the model's prompt or the data, and must
// not become a formula in the file a user opens: every text is quoted, so
// that no separator splits it, whichever a spreadsheet takes (";" in many
// locales, where "a;=f()" unquoted would be two cells, the second a
// formula); one starting with = + - @, a tab or a carriage return gets a
// leading ' so that a spreadsheet shows it as text.
func appendCSVField(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0 {
		s = "'" + s
	}
	b = append(b, '"')
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			break
		}
		b = append(b, s[:i+1]...)
		b = append(b, '"')
		s = s[i+1:]
	}
	b = append(b, s...)
	return append(b, '"')
}

// dataQueries counts the data queries running in this process, per
// account and per user. Each holds a connection of its data source for up
// to its timeout, a pool every account shares with the chat's tools: the
// running-turn limits bound them too, counted apart from the turns.
type dataQueries struct {
	mu      sync.Mutex
	account map[int64]int
	user    map[string]int
}

// enter admits a data query of user in account within lim (a zero field
// is no limit), or returns the 429 of the limit reached; leave ends it.
func (q *dataQueries) enter(account int64, user string, lim TurnLimits) (leave func(), err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.account == nil {
		q.account, q.user = make(map[int64]int), make(map[string]int)
	}
	switch {
	case lim.User > 0 && q.user[user] >= lim.User:
		return nil, wire.Limited("runningTurnsPerUser", wire.TooMany(turnRetryAfter, "running query limit of %d per user reached: wait for a query to end", lim.User))
	case lim.Account > 0 && q.account[account] >= lim.Account:
		return nil, wire.Limited("runningTurns", wire.TooMany(turnRetryAfter, "running query limit of %d reached for this account: try again later", lim.Account))
	}
	q.account[account]++
	q.user[user]++
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.account[account]--; q.account[account] <= 0 {
			delete(q.account, account)
		}
		if q.user[user]--; q.user[user] <= 0 {
			delete(q.user, user)
		}
	}, nil
}

// dataQueryUser names the user of a data query for its limit: the
// session's user, or the user sessionSettings name in the account.
func dataQueryUser(c caller, req DataRequest) string {
	var external, internal string
	switch {
	case c.es != nil:
		external, internal = c.es.User.ExternalID, c.es.User.InternalID
	case req.SessionSettings != nil:
		external, internal = req.SessionSettings.ExternalID, req.SessionSettings.InternalID
	}
	if internal != "" {
		return strconv.FormatInt(c.acct.ID, 10) + ":internal:" + internal
	}
	return strconv.FormatInt(c.acct.ID, 10) + ":external:" + external
}
