package main

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/testdb"
)

// Secrets of the tests below, each in one place of the configuration.
const (
	pwUserinfo = "Pw-in-userinfo-1"
	pwQuery    = "Pw/in query&2" // escaped in the DSN
	pwKeyValue = "Pw-key-value-3"
	llmUser    = "tok-user-4"
	llmPass    = "Pw-in-url-5"
	llmQuery   = "Query-key-6"
	llmKey     = "sk-env-key-7"
	pgEnvPass  = "Pw-pgpassword-8"
	// Passwords written as no escaper writes them: unescaped where a URL
	// parser stops ("#", "/"), or escaped where Go would not ("%7E").
	pwHash    = "Hash#Secret-9"
	pwSlash   = "Slash/Secret-10"
	pwTilde   = "Tilde%7ESecret-11"
	llmPrefix = "Prefix-Secret-12"
	pwQmark   = "Qmark?Secret-13" // a "?" keeps the URL from parsing
	pwNoHost  = "Pw-no-host-14"   // in a key=value DSN without host=
	pwRawQ    = "Pw%7Equery-15"   // a later query parameter, escaped as Go would not
	llmRawQ   = "Key%7Eraw-16"
)

var allSecrets = []string{pwUserinfo, pwQuery, url.QueryEscape(pwQuery), pwKeyValue, llmUser, llmPass, llmQuery, llmKey, pgEnvPass,
	pwHash, "Hash", pwSlash, "Slash", pwTilde, "Tilde~Secret", llmPrefix, pwQmark, "Qmark", pwNoHost,
	pwRawQ, "Pw~query-15", llmRawQ, "Key~raw-16"}

func assertNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range allSecrets {
		if strings.Contains(text, s) {
			t.Errorf("%s shows the secret %q:\n%s", what, s, text)
		}
	}
}

// closedAddr returns an address where nothing listens.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestNoSecretInFailedStart: a database that cannot be reached fails the
// start with an error that names no password of the DSN, whichever way
// the DSN holds it; the usage printed for a bad flag shows no password of
// EMBED_DB either.
func TestNoSecretInFailedStart(t *testing.T) {
	t.Setenv("PGPASSWORD", pgEnvPass)
	addr := closedAddr(t)
	for _, dsn := range []string{
		"postgres://postgres:" + pwUserinfo + "@" + addr + "/test?sslmode=disable&password=" + url.QueryEscape(pwQuery),
		"host=127.0.0.1 port=" + addr[strings.LastIndex(addr, ":")+1:] + " user=postgres password=" + pwKeyValue + " dbname=test sslmode=disable",
		"postgres://postgres@" + addr + "/test?sslmode=disable", // PGPASSWORD
		"postgres://postgres:" + pwHash + "@" + addr + "/test",
		"postgres://postgres:" + pwSlash + "@" + addr + "/test",
		"postgres://postgres:" + pwTilde + "@" + addr + "/test",
		"postgres://postgres:" + pwQmark + "@" + addr + "/test",
		"port=" + addr[strings.LastIndex(addr, ":")+1:] + " user=postgres password=" + pwNoHost + " dbname=test sslmode=disable",
		// DSNs that do not parse, with a password spelt in ways pgx's
		// message does not hide.
		"host=127.0.0.1 user=postgres password = " + pwKeyValue + " dbname=test sslmode=bogus",
		"host=127.0.0.1 user=postgres password= " + pwKeyValue + " dbname=test port=54x32",
		`host=127.0.0.1 user=postgres password='ab\'` + pwKeyValue + ` x' dbname=test sslmode=bogus`,
	} {
		var out bytes.Buffer
		// A DSN taken for a SQLite path would start a server: it stops
		// at the deadline, without the error.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := run(ctx, context.Background(), []string{"-addr", "127.0.0.1:0", "-db", dsn}, &out, &out)
		cancel()
		if err == nil {
			t.Fatalf("run with an unreachable database %q: no error", dbLabel(dsn))
		}
		assertNoSecret(t, "the error", err.Error())
		assertNoSecret(t, "the output", out.String())
	}

	// A model endpoint's URL that does not parse ("#" in the password).
	t.Setenv("OPENAI_BASE_URL", "http://tok:"+llmPrefix+"#rest@127.0.0.1:1/v1")
	var llmOut bytes.Buffer
	err := run(context.Background(), context.Background(), []string{"-addr", "127.0.0.1:0", "-db", ":memory:", "-agent", "llm", "-llm-model", "m"}, &llmOut, &llmOut)
	if err == nil {
		t.Fatal("a model URL that does not parse: no error")
	}
	assertNoSecret(t, "the error", err.Error())
	assertNoSecret(t, "the output", llmOut.String())
	t.Setenv("OPENAI_BASE_URL", "")

	t.Setenv("EMBED_DB", "postgres://postgres:"+pwUserinfo+"@"+addr+"/test?password="+url.QueryEscape(pwQuery)+"&sslmode=disable&password="+pwRawQ)
	var out bytes.Buffer
	if err := run(context.Background(), context.Background(), []string{"-no-such-flag"}, &out, &out); err == nil {
		t.Fatal("an unknown flag: no error")
	}
	if !strings.Contains(out.String(), "-db") {
		t.Errorf("usage not printed: %q", out.String())
	}
	assertNoSecret(t, "the usage", out.String())
}

// TestNoSecretInOutput runs the server with a model endpoint whose URL
// carries credentials in its userinfo and query and a key in
// OPENAI_API_KEY, on PostgreSQL with a password in its DSN (PostgreSQL
// ignores it under trust authentication), makes the model request fail and
// checks that no secret appears in anything the server wrote.
func TestNoSecretInOutput(t *testing.T) {
	model := closedAddr(t) // every model request fails: its error names the URL
	t.Setenv("OPENAI_BASE_URL", "http://"+llmUser+":"+llmPass+"@"+model+"/v1?api-key="+llmQuery+"&token="+llmRawQ)
	t.Setenv("OPENAI_API_KEY", llmKey)
	db := ":memory:"
	if os.Getenv(testdb.EnvPostgresDSN) != "" {
		u, err := url.Parse(testdb.OpenDSN(t, testdb.Postgres))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(u.User.Username(), pwUserinfo)
		q := u.Query()
		q.Set("password", pwQuery)
		u.RawQuery = q.Encode()
		db = u.String()
	}
	s := startServer(t, "-db", db, "-agent", "llm", "-llm-model", "m")
	if db != ":memory:" {
		// The same password as the operator may write it, escaped where Go
		// would not: trust authentication ignores it.
		tilde := strings.Replace(db, ":"+pwUserinfo+"@", ":"+pwTilde+"@", 1)
		s2 := startServer(t, "-db", tilde)
		s2.shutdown(t)
		assertNoSecret(t, "the output", s2.output.String())
	}

	client := chatstream.NewClient(s.base, chatstream.WithAPIKey("sk-acme-user"))
	var state *chatstream.Message
	for m, err := range client.Stream(t.Context(), "acme", "7", chatstream.Request{Input: "revenue?", SessionSettings: &chatstream.SessionSettings{ExternalID: "u"}}) {
		if err != nil {
			t.Fatal(err)
		}
		if m.ID == chatstream.StateID {
			state = &m
		}
	}
	if state == nil || state.State == nil || state.State.Error == "" {
		t.Fatalf("the turn did not end with an error: %+v", state)
	}
	assertNoSecret(t, "the stream's state", state.State.Error)
	s.shutdown(t)
	assertNoSecret(t, "the output", s.output.String())
	if !strings.Contains(s.output.String(), "model request failed") {
		t.Errorf("the model's failure is not logged:\n%s", s.output.String())
	}
}

// TestDBLabel: the server names a PostgreSQL database by its hosts, ports
// and name alone, and the scrubber takes nothing but credentials from a
// DSN (an "@" in its query is not a userinfo's).
func TestDBLabel(t *testing.T) {
	for dsn, want := range map[string]string{
		"embed.db": "embed.db",
		"postgres://u:" + pwUserinfo + "@127.0.0.1:5432/test?sslmode=disable": "postgres://127.0.0.1:5432/test",
		"host=/var/run/postgresql dbname=test sslmode=disable":                "postgres://unix:/var/run/postgresql/test",
		"host=::1 port=5433 dbname=test sslmode=disable":                      "postgres://[::1]:5433/test",
		"postgres://h1:5432,h2:5433/db?sslmode=disable":                       "postgres://h1:5432,h2:5433/db",
		"postgres://u:" + pwHash + "@127.0.0.1:5432/test":                     "(a PostgreSQL DSN that does not parse)",
	} {
		if got := dbLabel(dsn); got != want {
			t.Errorf("dbLabel(%q) = %q, want %q", dsn, got, want)
		}
	}
	sc := &scrubber{}
	sc.add(dbSecrets("postgres://127.0.0.1:5432/test?sslmode=disable&user=admin@myserver")...)
	sc.add(urlSecrets("http://127.0.0.1:11434/v1?x=a@b")...)
	if text := "listening (db postgres://127.0.0.1:5432/test), model at 127.0.0.1:11434"; sc.scrub(text) != text {
		t.Errorf("the scrubber took a host or port for a secret: %q", sc.scrub(text))
	}
}

// TestScrubberLeavesWords: a short secret that is also an everyday word
// is replaced where it stands as a credential, not inside the server's
// ordinary output (the demo's API keys, a database's label).
func TestScrubberLeavesWords(t *testing.T) {
	sc := &scrubber{}
	sc.add("admin", "postgres", "user", "pw")
	sc.add(urlSecrets("http://admin@127.0.0.1:11434/v1")...)
	sc.add(dbSecrets("postgres://postgres:postgres@127.0.0.1:5432/test")...)
	for _, text := range []string{
		`demo account "acme": admin key sk-acme-admin, user key sk-acme-user`,
		`try: curl -H 'Authorization: Api-Key sk-acme-admin' http://127.0.0.1:8080/`,
		`listening on http://127.0.0.1:8080 (db postgres://127.0.0.1:5432/test)`,
		`superuser administrator pwd`,
	} {
		// The words themselves, standing alone, are taken for the secrets.
		want := strings.NewReplacer(" admin key", " "+redacted+" key", " user key", " "+redacted+" key").Replace(text)
		if got := sc.scrub(text); got != want {
			t.Errorf("scrub(%q) = %q, want %q", text, got, want)
		}
	}
	for text, want := range map[string]string{
		`parse "postgres://postgres:postgres@host/db": invalid port`: `parse "postgres://xxxxx@host/db": invalid port`,
		`-db string (default "postgres://u:admin@h/db?password=pw")`: `-db string (default "postgres://u:xxxxx@h/db?password=xxxxx")`,
		`host=h password=admin dbname=db`:                            `host=h password=xxxxx dbname=db`,
		`Get "http://admin@127.0.0.1:11434/v1/chat": refused`:        `Get "http://xxxxx@127.0.0.1:11434/v1/chat": refused`,
		`key "admin".`: `key "xxxxx".`,
		`admin`:        `xxxxx`,
	} {
		if got := sc.scrub(text); got != want {
			t.Errorf("scrub(%q) = %q, want %q", text, got, want)
		}
	}
	// A long secret is replaced wherever it appears, inside a word too.
	sc.add("Long-secret-0123456789")
	if got := sc.scrub("xLong-secret-0123456789x"); got != "x"+redacted+"x" {
		t.Errorf("a long secret inside a word: %q", got)
	}
}

// TestPrintedKeysSurviveShortSecrets: with a model endpoint whose user
// name is an everyday word, the server still prints the demo's lines (its
// API keys, its curl line) as they are.
func TestPrintedKeysSurviveShortSecrets(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://admin@"+closedAddr(t)+"/v1")
	t.Setenv("OPENAI_API_KEY", "")
	s := startServer(t, "-db", ":memory:", "-agent", "llm", "-llm-model", "m")
	s.shutdown(t)
	out := s.output.String()
	if !strings.Contains(out, `demo account "acme": admin API key sk-acme-admin, user API key sk-acme-user`+"\n") ||
		!strings.Contains(out, "Api-Key sk-acme-admin") {
		t.Errorf("the demo's lines are not printed as they are:\n%s", out)
	}
}

// TestIsPostgres: a key=value DSN is PostgreSQL with or without host=
// and with spaces around "=", as libpq reads it; SQLite paths stay SQLite.
func TestIsPostgres(t *testing.T) {
	for db, want := range map[string]bool{
		"postgres://u@h/db":                      true,
		"postgresql://u@h/db":                    true,
		"host=h dbname=db":                       true,
		"dbname=db user=u password=p":            true,
		"host = 127.0.0.1 user = u password = p": true,
		"port=5433 sslmode=disable":              true,
		"embed.db":                               false,
		":memory:":                               false,
		"file:embed.db?mode=rwc&cache=shared":    false,
		"/tmp/my data/embed.db":                  false,
		"/var/lib/embedkit/passport=1/embed.db":  false,
		"./reports/hosting/embed.db":             false,
	} {
		if got := isPostgres(db); got != want {
			t.Errorf("isPostgres(%q) = %v, want %v", db, got, want)
		}
	}
}

// FuzzScrubber: whatever the secret, it does not survive where a
// credential stands (a URL's user info, a DSN's password=, a quoted
// string, a header), in any of the forms the scrubber registers, and a
// long secret survives nowhere.
func FuzzScrubber(f *testing.F) {
	for _, s := range []string{"admin", "postgres", "p@ss:w/rd?#", "Pw%7Equery", "sk-0123456789abcdef", "~", "a b", "xxxxx", "ünï"} {
		f.Add(s, "sk-acme-admin user postgres://h/db")
	}
	f.Fuzz(func(t *testing.T, secret, other string) {
		if secret == "" || strings.ContainsAny(secret, " \t\r\n\"'@") || strings.Contains(secret, redacted) {
			t.Skip() // the contexts below end a credential at these; the mark itself stays
		}
		sc := &scrubber{}
		sc.add(secret)
		for _, form := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret)} {
			for _, ctx := range []string{"postgres://u:%s@h/db", "host=h password=%s dbname=d", `key "%s".`, "Api-Key %s\n"} {
				text := other + " " + strings.Replace(ctx, "%s", form, 1)
				got := sc.scrub(text)
				if strings.Contains(got, strings.Replace(ctx, "%s", form, 1)) {
					t.Fatalf("scrub(%q) = %q: the secret %q stands in it", text, got, form)
				}
			}
		}
		if len(secret) >= shortSecret && strings.Contains(sc.scrub(other+secret+other), secret) {
			t.Fatalf("a long secret %q survives inside %q", secret, other)
		}
	})
}

// TestDBSecretsOfDSNsThatDoNotParse: the password of a key=value DSN the
// driver refuses is still known to the scrubber, however it is spelt.
func TestDBSecretsOfDSNsThatDoNotParse(t *testing.T) {
	for dsn, want := range map[string]string{
		"host=h password = Pw-spaced-1 sslmode=bogus":   "Pw-spaced-1",
		"host=h password= Pw-spaced-2 port=54x32":       "Pw-spaced-2",
		"host=h PASSWORD=Pw-upper-3 port=54x32":         "Pw-upper-3",
		`host=h password='Pw quoted 4' port=54x32`:      "Pw quoted 4",
		`host=h password='Pw\'escaped 5' port=54x32`:    `Pw'escaped 5`,
		`host=h sslpassword = Pw-ssl-6 port=54x32`:      "Pw-ssl-6",
		`host=h password='Pw unterminated 7 port=54x32`: "Pw unterminated 7 port=54x32",
	} {
		if got := dbSecrets(dsn); !slices.Contains(got, want) {
			t.Errorf("dbSecrets(%q) = %q, want %q among them", dsn, got, want)
		}
	}
}
