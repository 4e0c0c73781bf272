package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/embedsession"
)

// TestRowSecurityFailsClosed asks the demo agent "revenue by country" over
// HTTP as users whose country filter has no value in their session's
// scope: a user without the attribute, one whose value was set to null,
// and a creator-mode session for an embed tenant (whose scope has no
// country, although the user's account-wide country is Germany). Each
// sees no rows; a user with a country sees only that country.
func TestRowSecurityFailsClosed(t *testing.T) {
	s := startServer(t, "-db", ":memory:")
	ctx := t.Context()
	sessions := embedsession.NewClient(s.base, "sk-acme-admin")
	country := func(v string) []embedsession.UserAttribute {
		return []embedsession.UserAttribute{{Name: "country", Value: json.RawMessage(v)}}
	}
	mint := func(req embedsession.SessionRequest) string {
		t.Helper()
		req.DeploymentID = 1
		sid, err := sessions.GenerateSession(ctx, req)
		if err != nil {
			t.Fatalf("generate-session %s: %v", req.ExternalID, err)
		}
		tok, err := sessions.ExchangeToken(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	// totalRows of the svcSqlApi call of one "revenue by country" turn.
	ask := func(token string) (rows []any, total float64) {
		t.Helper()
		c := chatstream.NewClient(s.base, chatstream.WithBearerToken(token))
		for m, err := range c.Stream(context.WithoutCancel(ctx), "acme", "7", chatstream.Request{Input: "revenue by country"}) {
			if err != nil {
				t.Fatal(err)
			}
			if m.ToolCall == nil || m.ToolCall.Name != "svcSqlApi" || m.ToolCall.Result == nil {
				continue
			}
			var res struct {
				Data      []any   `json:"data"`
				TotalRows float64 `json:"totalRows"`
			}
			if err := json.Unmarshal([]byte(*m.ToolCall.Result), &res); err != nil {
				t.Fatalf("svcSqlApi result %q: %v", *m.ToolCall.Result, err)
			}
			return res.Data, res.TotalRows
		}
		t.Fatal("no svcSqlApi result in the stream")
		return nil, 0
	}

	if _, n := ask(mint(embedsession.SessionRequest{ExternalID: "de-user", UserAttributes: country(`"Germany"`)})); n != 1 {
		t.Errorf("a German user: totalRows %v, want 1 (Germany only)", n)
	}
	for name, tok := range map[string]string{
		"missing attribute": mint(embedsession.SessionRequest{ExternalID: "no-country"}),
		"null attribute": func() string {
			mint(embedsession.SessionRequest{ExternalID: "nulled", UserAttributes: country(`"France"`)})
			return mint(embedsession.SessionRequest{ExternalID: "nulled", UserAttributes: country(`null`)})
		}(),
		"creator-mode scope": mint(embedsession.SessionRequest{ExternalID: "de-user", CreatorMode: true, EmbedTenantName: "tenant-a"}),
	} {
		if data, n := ask(tok); n != 0 || len(data) != 0 {
			t.Errorf("%s: totalRows %v, %d rows; want none", name, n, len(data))
		}
	}
}
