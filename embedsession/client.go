package embedsession

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/embedkit/embedkit/middleware/httperr"
)

// Client calls the embed-session API from Go: a server-side caller that
// holds the API key. It is safe for concurrent use.
type Client struct {
	base   string
	apiKey string
	hc     *http.Client
}

// ClientOption configures a [Client] at [NewClient]. Like the handler's
// options, an invalid value panics when its With function is called.
type ClientOption func(*Client)

// WithHTTPClient sets the HTTP client. Default: http.DefaultClient. hc must
// not be nil; WithHTTPClient panics otherwise.
func WithHTTPClient(hc *http.Client) ClientOption {
	if hc == nil {
		panic("embedsession: WithHTTPClient: client must not be nil, got nil")
	}
	return func(c *Client) { c.hc = hc }
}

// NewClient returns a client of the API at baseURL (the server root, for
// example "https://embed.example.com") authenticating with apiKey.
func NewClient(baseURL, apiKey string, opts ...ClientOption) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), apiKey: apiKey, hc: http.DefaultClient}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// GenerateSession provisions the user of req and returns a new sessionId to
// place in the embed URL. Failures answered by the server are
// *[httperr.Error]. A request holding a string that is not valid UTF-8 is
// refused before it is sent (JSON encoding would replace the invalid bytes
// silently).
func (c *Client) GenerateSession(ctx context.Context, req SessionRequest) (string, error) {
	if err := req.checkText(); err != nil {
		return "", fmt.Errorf("embedsession: %w", err)
	}
	var out SessionResponse
	if err := c.do(ctx, http.MethodPost, PathGenerateSession, req, &out); err != nil {
		return "", err
	}
	return out.SessionID, nil
}

// ExchangeToken exchanges a single-use sessionId for a token.
func (c *Client) ExchangeToken(ctx context.Context, sessionID string) (TokenResponse, error) {
	var out TokenResponse
	err := c.do(ctx, http.MethodPost, PathSessionToken, TokenRequest{SessionID: sessionID}, &out)
	return out, err
}

// RevokeUserSessions ends every session and token of an external user
// (admin key).
func (c *Client) RevokeUserSessions(ctx context.Context, externalID string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/embed/users/"+segment(externalID)+"/sessions", nil, nil)
}

// DeleteUser deprovisions an external user (admin key).
func (c *Client) DeleteUser(ctx context.Context, externalID string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/embed/users/"+segment(externalID), nil, nil)
}

// ListGroups returns one page of an embed tenant's groups (admin key).
// first of zero asks for the server's default page size; after is the
// previous page's EndCursor, or "" for the first page.
func (c *Client) ListGroups(ctx context.Context, embedTenant string, first int, after string) (Page[GroupItem], error) {
	var out Page[GroupItem]
	err := c.do(ctx, http.MethodGet, listPath(embedTenant, "groups", first, after), nil, &out)
	return out, err
}

// ListAttributes returns one page of an embed tenant's attribute
// definitions (admin key), like [Client.ListGroups].
func (c *Client) ListAttributes(ctx context.Context, embedTenant string, first int, after string) (Page[AttributeItem], error) {
	var out Page[AttributeItem]
	err := c.do(ctx, http.MethodGet, listPath(embedTenant, "user-attributes", first, after), nil, &out)
	return out, err
}

// DeleteGroup deletes a group of an embed tenant by id (admin key).
func (c *Client) DeleteGroup(ctx context.Context, embedTenant, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/embed-tenants/"+segment(embedTenant)+"/groups/"+segment(id), nil, nil)
}

// DeleteAttribute deletes an attribute definition of an embed tenant by id
// (admin key).
func (c *Client) DeleteAttribute(ctx context.Context, embedTenant, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/embed-tenants/"+segment(embedTenant)+"/user-attributes/"+segment(id), nil, nil)
}

// segment escapes s as one path segment; a dot segment too, which
// url.PathEscape leaves as it is and URL normalization would remove.
func segment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

func listPath(tenant, kind string, first int, after string) string {
	q := url.Values{}
	if first > 0 {
		q.Set("first", strconv.Itoa(first))
	}
	if after != "" {
		q.Set("after", after)
	}
	p := "/api/v1/embed-tenants/" + segment(tenant) + "/" + kind
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("embedsession: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("embedsession: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Api-Key "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("embedsession: %s %s: %w", method, pathLabel(path), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("embedsession: read response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return httperr.Parse(resp.StatusCode, b)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("embedsession: decode response: %w", err)
	}
	return nil
}

// pathLabel returns path without its query, for error messages.
func pathLabel(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}
