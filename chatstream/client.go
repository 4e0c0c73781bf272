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
	"net/http"
	"net/url"
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
	return c.base + "/api/v1/public/" + url.PathEscape(accountName) + "/agents/" + url.PathEscape(agentID) + "/chat/" + endpoint
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
