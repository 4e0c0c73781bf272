package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/embedkit/embedkit/store/operator"
)

// redacted replaces a secret in the server's output.
const redacted = "xxxxx"

// scrubber replaces every secret the server was given (in a flag, in the
// environment or in the -config file) wherever it appears in the server's
// output: start-up lines, logs, usage and errors. Redacting where each value
// is printed is not enough: a database driver or an HTTP client quotes a
// DSN or a URL in its errors, and the flag package prints the defaults,
// which come from the environment. So everything the server writes goes
// through one scrubber, which knows the secrets' values.
//
// A short secret may also be an everyday word ("admin", "postgres", a URL's
// user name "user"), which ordinary output holds: the demo's API key
// sk-acme-admin, the postgres:// of a database's label. Such a secret is
// replaced only where it stands as a whole token, as a credential does in a
// URL, a DSN, a header or a quoted string: between characters that cannot
// continue it (see tokenChar), and not as a URL's scheme (followed by
// "://"). A longer secret is replaced wherever it appears.
type scrubber struct {
	mu      sync.Mutex
	secrets []string // longest first, so that a secret containing another is replaced whole
}

// shortSecret is the length under which a secret is replaced only as a
// whole token.
const shortSecret = 16

// add registers secrets, in the forms they take when printed: as given, and
// escaped in a URL or in a quoted string.
func (s *scrubber) add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range secrets {
		if v == "" {
			continue
		}
		quoted := strconv.Quote(v)
		s.secrets = append(s.secrets, v, url.QueryEscape(v), url.PathEscape(v),
			url.UserPassword("", v).String()[1:], quoted[1:len(quoted)-1])
	}
	slices.SortFunc(s.secrets, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	s.secrets = slices.Compact(s.secrets)
}

// scrub returns text without the secrets.
func (s *scrubber) scrub(text string) string {
	s.mu.Lock()
	secrets := s.secrets
	s.mu.Unlock()
	if len(secrets) == 0 {
		return text
	}
	var b strings.Builder
	done := 0 // text[:done] is written to b
	for i := 0; i < len(text); {
		n := 0
		for _, v := range secrets {
			if strings.HasPrefix(text[i:], v) && (len(v) >= shortSecret || wholeToken(text, i, i+len(v))) {
				n = len(v)
				break
			}
		}
		if n == 0 {
			i++
			continue
		}
		b.WriteString(text[done:i])
		b.WriteString(redacted)
		i += n
		done = i
	}
	if done == 0 {
		return text
	}
	b.WriteString(text[done:])
	return b.String()
}

// wholeToken reports whether text[i:j] stands as a whole token: no token
// character on either side, and not a URL's scheme.
func wholeToken(text string, i, j int) bool {
	return (i == 0 || !tokenChar(text[i-1])) && (j == len(text) || !tokenChar(text[j])) &&
		!strings.HasPrefix(text[j:], "://")
}

// tokenChar reports whether c may continue a word or a credential: a
// letter, a digit, or - _ ~ % + (and any byte of a multi-byte UTF-8
// character). Everything else ends one: spaces, quotes and the
// separators of URLs, DSNs and headers (: @ / ? # & = , ; . and so on).
func tokenChar(c byte) bool {
	return c >= 0x80 || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_~%+", c) >= 0
}

// scrubErr returns err with the secrets removed from its message; a
// usage error stays one.
func (s *scrubber) scrubErr(err error) error {
	if err == nil {
		return nil
	}
	if msg := s.scrub(err.Error()); msg != err.Error() {
		if errors.As(err, new(usageError)) {
			return usageError{errors.New(msg)}
		}
		return errors.New(msg)
	}
	return err
}

// writer returns w behind the scrubber. Every writer of the server's output
// (log/slog handlers, fmt.Fprint*, the flag package) writes whole lines or
// messages in one Write, so a secret is never split between two writes.
func (s *scrubber) writer(w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if _, err := io.WriteString(w, s.scrub(string(p))); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// envSecrets returns the secrets of the environment variables the server
// reads: the passwords of EMBED_DB (and PGPASSWORD), the model endpoint's
// key and the credentials of its URL.
func envSecrets() []string {
	base, key := llmEnv()
	return slices.Concat(dbSecrets(os.Getenv("EMBED_DB")), []string{key}, urlSecrets(base))
}

// optionSecrets returns the secrets of the flags.
func optionSecrets(o options) []string {
	return slices.Concat(dbSecrets(o.db), []string{o.llmAPIKey}, urlSecrets(o.llmBaseURL))
}

// configSecrets returns the API keys of a -config file. The built-in demo's
// keys are not secret: the server prints them for a first try.
func configSecrets(cfg operator.Config) []string {
	var out []string
	for _, a := range cfg.Accounts {
		for _, k := range a.APIKeys {
			out = append(out, k.Key)
		}
	}
	return out
}

// dbSecrets returns the passwords of a PostgreSQL DSN, in a URL's userinfo
// or query, in a key=value DSN, or from PGPASSWORD: whatever the driver
// would use. A SQLite path has none.
func dbSecrets(db string) []string {
	if !isPostgres(db) {
		return nil
	}
	out := urlSecrets(db)
	if cfg, err := pgconn.ParseConfig(db); err == nil {
		out = append(out, cfg.Password)
	}
	// A key=value DSN the driver cannot parse may still hold a password,
	// spaces around "=" and a quoted value included (as libpq reads it,
	// and as written).
	for _, m := range kvPassword.FindAllStringSubmatch(db, -1) {
		v := m[1]
		if q, ok := strings.CutPrefix(v, "'"); ok {
			q = strings.TrimSuffix(q, "'")
			out = append(out, q, strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(q))
			continue
		}
		out = append(out, v)
	}
	return append(out, os.Getenv("PGPASSWORD"))
}

// kvPassword finds a password field of a key=value DSN: its value,
// quoted ('...' with \' and \\ escapes) or up to white space.
var kvPassword = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)`)

// dbLabel names the database of -db in the server's output: a SQLite path
// as it is; a PostgreSQL DSN by its host, port and database alone, never
// as written (its password may be spelt in a form the scrubber does not
// know, %7E for ~, or break the URL parser, which then quotes pieces of
// it).
func dbLabel(db string) string {
	if !isPostgres(db) {
		return db
	}
	cfg, err := pgconn.ParseConfig(db)
	if err != nil {
		return "(a PostgreSQL DSN that does not parse)"
	}
	hosts := []string{pgHost(cfg.Host, cfg.Port)}
	for _, f := range cfg.Fallbacks {
		if h := pgHost(f.Host, f.Port); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return fmt.Sprintf("postgres://%s/%s", strings.Join(hosts, ","), cfg.Database)
}

// pgHost is host and port as a DSN writes them: a Unix socket's directory
// as unix:<dir>, an IPv6 address in brackets.
func pgHost(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return "unix:" + host
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// urlSecrets returns the credentials a URL may carry: its userinfo and the
// values of its query (an endpoint's ?api-key=, a DSN's ?password=), also
// as written (see rawUserinfo).
func urlSecrets(raw string) []string {
	u, err := url.Parse(raw)
	out := rawUserinfo(raw, err == nil)
	if err != nil {
		return out
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		out = append(out, pw)
		if !strings.HasPrefix(u.Scheme, "postgres") {
			out = append(out, u.User.Username()) // a token as the user name
		}
	}
	// Each value decoded and as written (%7E for ~, lower-case hex): the
	// start-up log and the usage print the URL so.
	for kv := range strings.SplitSeq(u.RawQuery, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if strings.HasPrefix(u.Scheme, "postgres") && !strings.Contains(strings.ToLower(k), "password") {
			continue // sslmode, search_path: settings, not secrets
		}
		out = append(out, v)
		if dv, err := url.QueryUnescape(v); err == nil {
			out = append(out, dv)
		}
	}
	return out
}

// rawUserinfo returns the credentials of a URL as written, which may not
// be how Go escapes them ("%7E" for "~") or may not parse at all ("#" in
// a password): the text between "://" and the last "@" and its part
// after the first ":" (a user name alone, only outside PostgreSQL, where
// it may be a token), and those cut at the first "#", "/" or "?", where a
// parser stops and quotes what came before. parses tells whether raw
// parses as a URL.
func rawUserinfo(raw string, parses bool) []string {
	_, rest, ok := strings.Cut(raw, "://")
	if parses {
		// An "@" of the query (user=a@b) is not the userinfo's; in a URL
		// that does not parse it may be: a "?" in the password.
		rest, _, _ = strings.Cut(rest, "?")
	}
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return nil
	}
	info := rest[:at]
	var out []string
	if user, pw, ok := strings.Cut(info, ":"); ok {
		out = append(out, info, pw)
	} else if !strings.HasPrefix(raw, "postgres") {
		out = append(out, user)
	}
	for _, s := range slices.Clone(out) {
		if i := strings.IndexAny(s, "#/?"); i > 0 { // a short one is replaced only whole (scrubber)
			out = append(out, s[:i])
		}
	}
	return out
}
