package apitest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// Whoami is the answer of [WhoamiPath]: the session's user and grant, with
// attribute values and groups of the session's scope (the embed tenant's in
// creator mode, else tenant-wide).
type Whoami struct {
	UserID          int64                      `json:"userId"`
	ExternalID      string                     `json:"externalId,omitempty"`
	InternalID      string                     `json:"internalId,omitempty"`
	Email           string                     `json:"email"`
	DisplayName     string                     `json:"displayName"`
	Picture         string                     `json:"picture"`
	UserAttributes  map[string]json.RawMessage `json:"userAttributes"`
	Groups          []string                   `json:"groups"`
	SecurityContext json.RawMessage            `json:"securityContext"`
	DeploymentID    int64                      `json:"deploymentId"`
	CreatorMode     bool                       `json:"creatorMode"`
	EmbedTenantName string                     `json:"embedTenantName"`
	// Token is middleware.EmbedSession.Token: set only on the request that
	// exchanged a sessionId.
	Token string `json:"token,omitempty"`
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	es, ok := middleware.EmbedSessionFromContext(r.Context())
	if !ok {
		wire.WriteError(w, r, nil, wire.Errorf(http.StatusUnauthorized, "no embed session"))
		return
	}
	u := es.User
	who := Whoami{
		UserID: u.ID, ExternalID: u.ExternalID, InternalID: u.InternalID, Email: u.Email,
		DisplayName: u.DisplayName, Picture: u.Picture, SecurityContext: u.SecurityContext,
		DeploymentID: es.Session.DeploymentID, CreatorMode: es.Session.CreatorMode,
		EmbedTenantName: es.Session.EmbedTenantName, Token: es.Token,
		UserAttributes: map[string]json.RawMessage{}, Groups: []string{},
	}
	attrs, groups, err := es.AttributesAndGroups(r.Context(), s.Store)
	if err != nil {
		wire.WriteError(w, r, nil, err)
		return
	}
	for _, a := range attrs {
		who.UserAttributes[a.Name] = a.Value
	}
	for _, g := range groups {
		who.Groups = append(who.Groups, g.Name)
	}
	wire.WriteJSON(w, http.StatusOK, who)
}

// Whoami opens the sessionId at [WhoamiPath] (exchanging it) and returns
// what the server answered; it fails the test unless the status is 200.
func (s *Server) Whoami(t testing.TB, sessionID string) Whoami {
	t.Helper()
	r := s.Send(t, s.Request(t, http.MethodGet, WhoamiPath+"?sessionId="+sessionID, "", nil))
	if r.Status != http.StatusOK {
		t.Fatalf("apitest: whoami = %d %s, want 200", r.Status, r.Raw)
	}
	var who Whoami
	if err := json.Unmarshal(r.Raw, &who); err != nil {
		t.Fatalf("apitest: whoami: %v", err)
	}
	return who
}

// Scope returns the catalog scope of an account: tenant-wide when
// embedTenant is "", else that embed tenant's (ok false when it does not
// exist).
func (s *Server) Scope(t testing.TB, account, embedTenant string) (store.Scope, bool) {
	t.Helper()
	acct := s.Accounts[account]
	if embedTenant == "" {
		return store.TenantWide(acct.ID), true
	}
	et, err := s.Store.EmbedTenantByName(context.Background(), acct.ID, embedTenant)
	if errors.Is(err, store.ErrNotFound) {
		return store.Scope{}, false
	}
	if err != nil {
		t.Fatalf("apitest: embed tenant: %v", err)
	}
	return store.Scope{AccountID: acct.ID, EmbedTenantID: et.ID}, true
}

// UserState is the stored state of an external user in one scope, for
// comparisons.
type UserState struct {
	Exists          bool
	Email           string
	DisplayName     string
	Picture         string
	SecurityContext string
	Attributes      map[string]string // name → compact JSON value
	Groups          []string
}

// User returns the stored state of an external user of account, with its
// attribute values and groups in the scope of embedTenant ("" for
// tenant-wide).
func (s *Server) User(t testing.TB, account, externalID, embedTenant string) UserState {
	t.Helper()
	ctx := context.Background()
	u, err := s.Store.UserByKey(ctx, store.UserKey{AccountID: s.Accounts[account].ID, ExternalID: externalID}, s.Now())
	if errors.Is(err, store.ErrNotFound) {
		return UserState{}
	}
	if err != nil {
		t.Fatalf("apitest: user: %v", err)
	}
	st := UserState{Exists: true, Email: u.Email, DisplayName: u.DisplayName, Picture: u.Picture,
		SecurityContext: string(u.SecurityContext), Attributes: map[string]string{}, Groups: []string{}}
	scope, ok := s.Scope(t, account, embedTenant)
	if !ok {
		return st
	}
	d, err := s.Store.UserData(ctx, u.ID, scope)
	if err != nil {
		t.Fatalf("apitest: user data: %v", err)
	}
	for _, a := range d.Attributes {
		st.Attributes[a.Name] = string(a.Value)
	}
	for _, g := range d.Groups {
		st.Groups = append(st.Groups, g.Name)
	}
	slices.Sort(st.Groups)
	return st
}

// CatalogState is the catalog of one scope: group names with descriptions,
// attribute names with their type and optional fields.
type CatalogState struct {
	Exists     bool
	Groups     map[string]string // name → description
	Attributes map[string]string // name → "type|displayName|defaultValue|description"
}

// Catalog returns the catalog of account's embedTenant ("" for
// tenant-wide). Exists is false when the embed tenant does not exist.
func (s *Server) Catalog(t testing.TB, account, embedTenant string) CatalogState {
	t.Helper()
	scope, ok := s.Scope(t, account, embedTenant)
	if !ok {
		return CatalogState{}
	}
	ctx := context.Background()
	c := CatalogState{Exists: true, Groups: map[string]string{}, Attributes: map[string]string{}}
	for after := int64(0); ; {
		gs, err := s.Store.ListGroups(ctx, scope, after, 1000)
		if err != nil {
			t.Fatalf("apitest: groups: %v", err)
		}
		for _, g := range gs {
			c.Groups[g.Name] = g.Description
			after = g.ID
		}
		if len(gs) < 1000 {
			break
		}
	}
	for after := int64(0); ; {
		as, err := s.Store.ListAttributes(ctx, scope, after, 1000)
		if err != nil {
			t.Fatalf("apitest: attributes: %v", err)
		}
		for _, a := range as {
			c.Attributes[a.Name] = string(a.Type) + "|" + a.DisplayName + "|" + a.DefaultValue + "|" + a.Description
			after = a.ID
		}
		if len(as) < 1000 {
			break
		}
	}
	return c
}
