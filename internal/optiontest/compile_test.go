package optiontest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// header opens every program this test compiles. The functions named _ are
// never run: the programs are only type-checked.
const header = `package main

import (
	"log/slog"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/chatstream/llmagent"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store/memstore"
)

var (
	st = memstore.New()
	l  = slog.Default()
	_  = time.Second
	_  = embedsession.NewHandler
	_  = analytics.NewSQLTool
	_  = chatpage.New
	_  = llmagent.New
)

func main() {}
`

// valid are calls that give each constructor options it reads, including
// the options shared by several constructors.
var valid = []string{
	`chatstream.NewHandler(st, nil, chatstream.WithLogger(l), chatstream.WithClock(time.Now), chatstream.WithTurnTimeout(time.Second), chatstream.WithKeyCache(time.Second))`,
	`chatstream.NewReaper(st, 0, chatstream.WithLogger(l), chatstream.WithClock(time.Now), chatstream.WithReapBatch(1))`,
	`middleware.APIKey(st, middleware.WithLogger(l), middleware.WithClock(time.Now), middleware.WithKeyCache(time.Second), middleware.WithKeyCacheSize(10), middleware.Optional())`,
	`middleware.Session(st, middleware.WithLogger(l), middleware.WithClock(time.Now), middleware.WithTokenTTL(time.Hour), middleware.WithCookieName("c"), middleware.WithCookiePath("/"), middleware.WithSecureCookie(true), middleware.WithRedirectAfterExchange())`,
	`middleware.APIKeyOrToken(st, middleware.WithLogger(l), middleware.WithClock(time.Now), middleware.WithKeyCache(time.Second))`,
	`embedsession.NewHandler(st, embedsession.WithLogger(l), embedsession.WithClock(time.Now))`,
	`chatpage.New(st, chatpage.FixedAgent("7"), chatpage.WithLogger(l), chatpage.WithTitle("t"))`,
	`llmagent.New("http://127.0.0.1:1/v1", "m", nil, llmagent.WithLogger(l), llmagent.WithIdleTimeout(time.Second))`,
	`func() (*analytics.SQLTool, error) { return analytics.NewSQLTool(nil, nil, analytics.WithTimeout(time.Second)) }`,
}

// wrong are calls that give a constructor an option it does not read: each
// must fail to compile.
var wrong = []string{
	`chatstream.NewReaper(st, 0, chatstream.WithDevelopment(true))`,
	`chatstream.NewReaper(st, 0, chatstream.WithTurnTimeout(time.Second))`,
	`chatstream.NewReaper(st, 0, chatstream.WithKeyCache(time.Second))`,
	`chatstream.NewHandler(st, nil, chatstream.WithReapBatch(1))`,
	`chatstream.NewHandler(st, nil, embedsession.WithLogger(l))`,
	`embedsession.NewHandler(st, chatstream.WithLogger(l))`,
	`middleware.APIKey(st, middleware.WithCookieName("c"))`,
	`middleware.APIKey(st, middleware.WithTokenTTL(time.Hour))`,
	`middleware.APIKey(st, middleware.WithRedirectAfterExchange())`,
	`middleware.Session(st, middleware.Optional())`,
	`middleware.Session(st, middleware.WithKeyCache(time.Second))`,
	`middleware.Session(st, middleware.WithKeyCacheSize(10))`,
	`middleware.APIKeyOrToken(st, middleware.Optional())`,
	`middleware.APIKeyOrToken(st, middleware.WithCookiePath("/"))`,
	`chatpage.New(st, chatpage.FixedAgent("7"), chatstream.WithLogger(l))`,
	`llmagent.New("http://127.0.0.1:1/v1", "m", nil, chatpage.WithLogger(l))`,
	`func() (*analytics.SQLTool, error) { return analytics.NewSQLTool(nil, nil, llmagent.WithIdleTimeout(time.Second)) }`,
}

// TestWrongOptionDoesNotCompile checks with the compiler that options are
// typed per constructor: an option a constructor does not read is a
// compile error, while options shared by several constructors (a logger, a
// clock) are accepted by each of them.
func TestWrongOptionDoesNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	build := func(calls []string) (string, error) {
		var src strings.Builder
		src.WriteString(header)
		for _, c := range calls {
			fmt.Fprintf(&src, "\nfunc _() { _ = %s }\n", c)
		}
		file := filepath.Join(t.TempDir(), "main.go")
		if err := os.WriteFile(file, []byte(src.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		// Built from this package's directory, the program resolves the
		// module's packages from the working tree.
		out, err := exec.Command(gobin, "build", "-gcflags=-e", "-o", os.DevNull, file).CombinedOutput()
		return string(out), err
	}

	if out, err := build(valid); err != nil {
		t.Fatalf("the valid calls do not compile: %v\n%s", err, out)
	}
	out, err := build(wrong)
	if err == nil {
		t.Fatal("the wrong calls compile")
	}
	// Line numbers of the wrong calls: header, then two lines per call.
	first := strings.Count(header, "\n") + 2
	for i, c := range wrong {
		mark := fmt.Sprintf("main.go:%d:", first+2*i)
		if !strings.Contains(out, mark) || !strings.Contains(out, "cannot use") {
			t.Errorf("%s compiles; want a type error at %s", c, mark)
		}
	}
	if t.Failed() {
		t.Logf("compiler output:\n%s", out)
	}
}
