package main

import (
	"encoding/json"
	"html/template"
	"net/http"

	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store"
)

// embedPages serves the host's embed pages (/embed/whoami, /embed/profile),
// behind the embed-session middleware.
type embedPages struct {
	st store.Store
}

type whoami struct {
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
}

func (p *embedPages) load(r *http.Request) (whoami, error) {
	es, ok := middleware.EmbedSessionFromContext(r.Context())
	if !ok {
		return whoami{}, httperr.Errorf(http.StatusUnauthorized, "no embed session")
	}
	s, u := es.Session, es.User
	w := whoami{
		ExternalID:      u.ExternalID,
		InternalID:      u.InternalID,
		Email:           u.Email,
		DisplayName:     u.DisplayName,
		Picture:         u.Picture,
		UserAttributes:  map[string]json.RawMessage{},
		Groups:          []string{},
		SecurityContext: u.SecurityContext,
		DeploymentID:    s.DeploymentID,
		CreatorMode:     s.CreatorMode,
		EmbedTenantName: s.EmbedTenantName,
	}
	if w.SecurityContext == nil {
		w.SecurityContext = json.RawMessage("{}")
	}
	// The attributes and groups of the session's scope: the embed
	// tenant's for a creator-mode session, else the account's.
	attrs, groups, err := es.AttributesAndGroups(r.Context(), p.st)
	if err != nil {
		return whoami{}, err
	}
	for _, a := range attrs {
		w.UserAttributes[a.Name] = a.Value
	}
	for _, g := range groups {
		w.Groups = append(w.Groups, g.Name)
	}
	return w, nil
}

func (p *embedPages) whoami(w http.ResponseWriter, r *http.Request) {
	who, err := p.load(r)
	if err != nil {
		httperr.Write(w, r, nil, err)
		return
	}
	b, err := json.Marshal(who)
	if err != nil {
		httperr.Write(w, r, nil, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

var profileTmpl = template.Must(template.New("profile").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<title>{{.Name}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem; }
.card { display: flex; align-items: center; gap: 1rem; }
.avatar { display: grid; width: 64px; height: 64px; }
.avatar > * { grid-area: 1 / 1; width: 64px; height: 64px; border-radius: 50%; }
.picture { background: center / cover no-repeat; }
.initials { background: #4f46e5; color: #fff; display: flex; align-items: center; justify-content: center;
  font-size: 1.5rem; font-weight: 600; }
.name { font-size: 1.25rem; }
</style>
</head>
<body>
<div class="card">
<div class="avatar"><div class="initials" id="initials">{{.Initials}}</div>
{{if .Picture}}<div class="picture" id="avatar" role="img" aria-label="{{.Name}}" style="background-image: url('{{.Picture}}')"></div>{{end}}</div>
<div class="name" id="display-name">{{.Name}}</div>
</div>
</body>
</html>
`))

// The picture, a background over the initials, hides them once it loads;
// one that fails to load draws nothing and leaves them showing, with no
// script on the page.
func (p *embedPages) profile(w http.ResponseWriter, r *http.Request) {
	who, err := p.load(r)
	if err != nil {
		httperr.Write(w, r, nil, err)
		return
	}
	name := who.DisplayName
	if name == "" {
		name = who.ExternalID + who.InternalID
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; img-src http: https: data:; style-src 'unsafe-inline'")
	_ = profileTmpl.Execute(w, struct {
		Name, Picture, Initials string
	}{name, who.Picture, chatpage.Initials(name)})
}
