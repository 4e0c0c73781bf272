package chatstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/embedkit/embedkit/middleware/httperr"
)

// Client calls the chat API over HTTP. A Client is safe for concurrent use.
type Client struct {
	base   string
	auth   string
	client *http.Client
}

// ClientOption configures a [Client] at [NewClient]. Like the handler's
// options, an invalid value panics when its With function is called.
type ClientOption func(*Client)

// WithAPIKey authenticates with Authorization: Api-Key <key>. Default: no
// Authorization header. key must not be empty; WithAPIKey panics
// otherwise.
func WithAPIKey(key string) ClientOption {
	if key == "" {
		panic(`chatstream: WithAPIKey: key must not be empty, got ""`)
	}
	return func(c *Client) { c.auth = "Api-Key " + key }
}

// WithBearerToken authenticates with Authorization: Bearer <token> (an
// embed session's token). Default: no Authorization header. token must not
// be empty; WithBearerToken panics otherwise.
func WithBearerToken(token string) ClientOption {
	if token == "" {
		panic(`chatstream: WithBearerToken: token must not be empty, got ""`)
	}
	return func(c *Client) { c.auth = "Bearer " + token }
}

// WithHTTPClient sets the HTTP client. Default: http.DefaultClient. Its
// Timeout, if any, bounds whole streams. hc must not be nil;
// WithHTTPClient panics otherwise.
func WithHTTPClient(hc *http.Client) ClientOption {
	if hc == nil {
		panic("chatstream: WithHTTPClient: client must not be nil, got nil")
	}
	return func(c *Client) { c.client = hc }
}

// NewClient returns a client for the chat API at baseURL (the chat base URL,
// e.g. "https://chat.example.com").
func NewClient(baseURL string, opts ...ClientOption) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), client: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c
}

func (c *Client) url(accountName, agentID, endpoint string) string {
	return c.agentURL(accountName, agentID) + "/chat/" + endpoint
}

func (c *Client) agentURL(accountName, agentID string) string {
	return c.base + "/api/v1/public/" + url.PathEscape(accountName) + "/agents/" + url.PathEscape(agentID)
}

func (c *Client) post(ctx context.Context, u string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("chatstream: encode request: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", ContentType)
	if c.auth != "" {
		hr.Header.Set("Authorization", c.auth)
	}
	resp, err := c.client.Do(hr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

func readAPIError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return httperr.Parse(resp.StatusCode, b)
}

// ErrIncompleteStream is yielded by [Client.Stream] when a stream ends
// before its __state__ message: the connection was cut (by a proxy, a
// write deadline, a server that stopped) and the messages received may be
// incomplete. Requesting the chat's state again (no input) rejoins the turn
// if it still runs, or returns the stored history.
var ErrIncompleteStream = errors.New("chatstream: the stream ended before its __state__ message")

// Stream sends req and yields the stream's messages as they arrive. An HTTP
// error is yielded once as an [*httperr.Error]; a broken stream as its error; a
// stream that ends without a __state__ message as [ErrIncompleteStream]. A
// request holding a string that is not valid UTF-8 is refused before it is
// sent (JSON encoding would replace the invalid bytes silently).
// The response body is closed when the loop ends or breaks.
func (c *Client) Stream(ctx context.Context, accountName, agentID string, req Request) iter.Seq2[Message, error] {
	return func(yield func(Message, error) bool) {
		if err := req.checkText(); err != nil {
			yield(Message{}, fmt.Errorf("chatstream: %w", err))
			return
		}
		resp, err := c.post(ctx, c.url(accountName, agentID, "stream-chat-state"), req)
		if err != nil {
			yield(Message{}, err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 256<<20)
		for sc.Scan() {
			b := sc.Bytes()
			if len(bytes.TrimSpace(b)) == 0 {
				continue
			}
			var m Message
			if err := json.Unmarshal(b, &m); err != nil {
				yield(Message{}, fmt.Errorf("chatstream: bad line: %w", err))
				return
			}
			if !yield(m, nil) {
				return
			}
			if m.ID == StateID {
				return // the end of the stream, whatever follows
			}
		}
		if err := sc.Err(); err != nil {
			yield(Message{}, err)
			return
		}
		yield(Message{}, ErrIncompleteStream)
	}
}

// Abort aborts the running turn of chatID. settings names the user (with an
// API key); with a bearer token it may be the zero value.
func (c *Client) Abort(ctx context.Context, accountName, agentID, chatID string, settings SessionSettings) error {
	body := AbortRequest{ChatID: chatID}
	if settings.ExternalID != "" || settings.InternalID != "" {
		body.SessionSettings = &settings
	}
	if err := (&Request{ChatID: chatID, SessionSettings: body.SessionSettings}).checkText(); err != nil {
		return fmt.Errorf("chatstream: %w", err)
	}
	resp, err := c.post(ctx, c.url(accountName, agentID, "abort"), body)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	return resp.Body.Close()
}

// ErrIncompleteData is yielded by [DataResult.Rows] when a data query's
// stream ends before its totalRows line: the connection was cut and the
// rows received are not the whole result.
var ErrIncompleteData = errors.New("chatstream: the data stream ended before its totalRows line")

// QueryData runs req through the data query API (POST
// .../agents/{agentId}/sql) and returns the result once its first row is
// ready: read the rows with [DataResult.Rows], which closes the response
// at its end, or call [DataResult.Close]. A query that fails before its
// first row (refused, invalid, out of time, an unknown branch) is an
// [*httperr.Error] with status 400 and the data source's message. A
// request holding a string that is not valid UTF-8 is refused before it is
// sent.
func (c *Client) QueryData(ctx context.Context, accountName, agentID string, req DataRequest) (*DataResult, error) {
	if err := req.checkText(); err != nil {
		return nil, fmt.Errorf("chatstream: %w", err)
	}
	resp, err := c.post(ctx, c.agentURL(accountName, agentID)+"/sql", req)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 256<<20)
	var first struct {
		Schema *[]DataColumn `json:"schema"`
	}
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &first) != nil || first.Schema == nil {
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("chatstream: the data stream does not start with its schema line")
	}
	return &DataResult{Columns: *first.Schema, body: resp.Body, sc: sc}, nil
}

// DataResult is the answer of [Client.QueryData], read a row at a time so
// that no result is held in memory whole.
type DataResult struct {
	// Columns describes the result's columns, in order.
	Columns []DataColumn
	// TotalRows is the number of rows the server sent, and Truncated
	// reports whether its row cap cut the result. Both are set once Rows
	// has yielded its last row.
	TotalRows int
	Truncated bool

	body io.ReadCloser
	sc   *bufio.Scanner
}

// Rows yields the result's rows as they arrive: each a slice of values in
// Columns order, a string, int64, float64, json.Number (a number with
// more digits than a float64 keeps, such as a PostgreSQL numeric), bool
// or nil (a number column's NaN and infinities, sent as strings, are
// float64 again). A query that
// fails after its first row yields a [*QueryError] with the server's
// message; a stream that ends before its totalRows line yields
// [ErrIncompleteData]. The response is closed when the loop ends or
// breaks. Rows can be ranged over once.
func (d *DataResult) Rows() iter.Seq2[[]any, error] {
	return func(yield func([]any, error) bool) {
		defer d.Close()
		numeric := make([]bool, len(d.Columns))
		for i, c := range d.Columns {
			numeric[i] = c.ColumnType == "number"
		}
		for d.sc.Scan() {
			b := d.sc.Bytes()
			if len(bytes.TrimSpace(b)) == 0 {
				continue
			}
			var line struct {
				Data      [][]any `json:"data"`
				TotalRows *int    `json:"totalRows"`
				Truncated bool    `json:"truncated"`
				Error     *string `json:"error"`
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			if err := dec.Decode(&line); err != nil {
				yield(nil, fmt.Errorf("chatstream: bad data line: %w", err))
				return
			}
			switch {
			case line.Error != nil:
				yield(nil, &QueryError{Msg: *line.Error})
				return
			case line.TotalRows != nil:
				d.TotalRows, d.Truncated = *line.TotalRows, line.Truncated
				return
			}
			for _, row := range line.Data {
				for i, v := range row {
					row[i] = dataValue(v, i < len(numeric) && numeric[i])
				}
				if !yield(row, nil) {
					return
				}
			}
		}
		if err := d.sc.Err(); err != nil {
			yield(nil, err)
			return
		}
		yield(nil, ErrIncompleteData)
	}
}

// Close closes the response; it is safe to call more than once.
func (d *DataResult) Close() error { return d.body.Close() }

// decimal is a JSON number's value as its significant digits and where
// the decimal point goes: 0.<digits> × 10^point.
type decimal struct {
	neg    bool
	digits string
	point  int
}

// decimalOf reads the JSON number s (or a float's 'e' format). Two texts
// of one value give the same decimal; an exponent beyond int gives the
// zero decimal with point -1, which no number has.
func decimalOf(s string) decimal {
	var d decimal
	if s != "" && s[0] == '-' {
		d.neg, s = true, s[1:]
	}
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	e := 0
	if exp != "" {
		var err error
		if e, err = strconv.Atoi(exp); err != nil {
			return decimal{point: -1}
		}
	}
	ip, fp, _ := strings.Cut(mant, ".")
	digits := ip + fp
	lead := len(digits) - len(strings.TrimLeft(digits, "0"))
	d.digits = strings.TrimRight(digits[lead:], "0")
	if d.digits == "" {
		return decimal{} // zero, whatever its sign
	}
	d.point = len(ip) + e - lead
	return d
}

// dataValue turns a decoded JSON value into the type DataRows.Values
// gives: json.Number into int64 when it is a whole number that fits (but
// -0, a float64's negative zero), else
// float64 when that keeps every digit (0.1 does: the shortest decimal of
// the float64 is the text's number), else the json.Number itself (such
// as PostgreSQL's numeric with more digits than a float64 holds).
func dataValue(v any, numeric bool) any {
	switch x := v.(type) {
	case json.Number:
		// -0 is a float64's: an int64 has no negative zero.
		if i, err := x.Int64(); err == nil && (i != 0 || x[0] != '-') {
			return i
		}
		f, err := x.Float64()
		if err != nil || decimalOf(string(x)) != decimalOf(strconv.FormatFloat(f, 'e', -1, 64)) {
			return x
		}
		return f
	case string:
		if numeric {
			switch x {
			case "NaN":
				return math.NaN()
			case "Infinity":
				return math.Inf(1)
			case "-Infinity":
				return math.Inf(-1)
			}
		}
	}
	return v
}
