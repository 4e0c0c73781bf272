package main

import (
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store/operator"
)

//go:embed demo
var demoFS embed.FS

// demoUser is a user of the demo host page.
type demoUser struct {
	ID, Name, Country string
	// Avatar is a file under /demo/avatars/, or "" for none. A missing
	// file shows the page's fallback to initials.
	Avatar string
}

var demoUsers = []demoUser{
	{"ana", "Ana Weber", "Germany", "ana.svg"},
	{"liam", "Liam Carter", "United States", "liam.svg"},
	{"yuki", "Yuki Tanaka", "Japan", "missing.png"},
	{"sam", "Sam Rivers", "", ""},
}

// demoHost is the demo host page: an application that embeds the chat.
type demoHost struct {
	client       *embedsession.Client
	deploymentID int64
	hasCountry   bool
}

var demoTmpl = template.Must(template.ParseFS(demoFS, "demo/index.html"))

// mountDemoHost mounts GET / and its assets. With enabled (the server runs
// the built-in demo config, no -config) it mints sessions for the demo
// users with the demo account's admin key, through the embedsession client
// and the router itself, as a host's back end would over the network.
// Otherwise the page says it is off: it never mints a session with the keys
// of a -config file, whose accounts are not demo accounts.
func mountDemoHost(r *mux.Router, enabled bool) error {
	static, err := fs.Sub(demoFS, "demo")
	if err != nil {
		return err
	}
	d := &demoHost{}
	if enabled {
		a := operator.DemoConfig().Accounts[0]
		for _, k := range a.APIKeys {
			if k.Admin {
				d.client = embedsession.NewClient("http://embedkit.internal", k.Key,
					embedsession.WithHTTPClient(&http.Client{Transport: routerTransport{r}}))
				break
			}
		}
		d.deploymentID = a.Deployments[0].ID
		for _, at := range a.UserAttributes {
			d.hasCountry = d.hasCountry || at.Name == "country"
		}
	}
	r.Handle("/", http.HandlerFunc(d.serve)).Methods(methods(http.MethodGet)...)
	r.PathPrefix("/demo/").Handler(http.StripPrefix("/demo/", demoStatic(http.FileServerFS(static)))).Methods(methods(http.MethodGet)...)
	return nil
}

func demoStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path == "index.html" || r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			httperr.Write(w, r, nil, httperr.Errorf(http.StatusNotFound, "no such endpoint: %s /demo/%s", r.Method, r.URL.Path))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// routerTransport serves client requests with the router in-process.
type routerTransport struct{ h http.Handler }

func (t routerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

func (d *demoHost) serve(w http.ResponseWriter, r *http.Request) {
	data := struct {
		Users    []demoUser
		Selected *demoUser
		ChatURL  string
		Error    string
	}{Users: demoUsers}
	id := r.URL.Query().Get("user")
	if d.client == nil {
		if id != "" {
			httperr.Write(w, r, nil, httperr.Errorf(http.StatusNotFound, "no demo users: the demo host page works with the built-in demo account only, and the server runs with -config"))
			return
		}
		data.Error = "The demo host page works with the built-in demo account only; this server runs with -config."
	} else if id != "" {
		for i := range demoUsers {
			if demoUsers[i].ID == id {
				data.Selected = &demoUsers[i]
			}
		}
		if data.Selected == nil {
			httperr.Write(w, r, nil, httperr.Errorf(http.StatusNotFound, "no demo user %q", id))
			return
		}
		sid, err := d.mint(r, *data.Selected)
		if err != nil {
			data.Error = "Could not start a session: " + err.Error()
		} else {
			data.ChatURL = "/embed/chat?" + url.Values{"sessionId": {sid}}.Encode()
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	_ = demoTmpl.Execute(w, data)
}

// avatarHost is the host of a demo avatar's URL: the request's Host when
// it names this server on a loopback name or address (so that the image is
// of the page's own origin), else the address the browser connected to.
// Never any other Host header, which any client sets: the demo users are
// shared, and their picture is shown to everyone who picks them.
func avatarHost(reqHost, local string) string {
	h, port, err := net.SplitHostPort(reqHost)
	_, localPort, lerr := net.SplitHostPort(local)
	if err != nil || lerr != nil || port != localPort {
		return local
	}
	if ip := net.ParseIP(h); h == "localhost" || (ip != nil && ip.IsLoopback()) {
		return reqHost
	}
	return local
}

// mint provisions the demo user and returns a new sessionId for it.
func (d *demoHost) mint(r *http.Request, u demoUser) (string, error) {
	req := embedsession.SessionRequest{
		DeploymentID: d.deploymentID,
		ExternalID:   "demo-" + u.ID,
		UserProfile:  &embedsession.UserProfile{DisplayName: embedsession.String(u.Name)},
	}
	pic := ""
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && u.Avatar != "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		pic = scheme + "://" + avatarHost(r.Host, local.String()) + "/demo/avatars/" + u.Avatar
	}
	req.UserProfile.Picture = &pic
	if d.hasCountry {
		v := json.RawMessage("null") // no country: the row filter shows nothing
		if u.Country != "" {
			v = embedsession.Value(u.Country)
		}
		req.UserAttributes = []embedsession.UserAttribute{{Name: "country", Value: v}}
	}
	return d.client.GenerateSession(r.Context(), req)
}
