package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// walkthroughImports are the packages the README's walkthrough may use, by
// the name its blocks call them with; the program built from the blocks
// imports those it names.
var walkthroughImports = map[string]string{
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"http":         "net/http",
	"os":           "os",
	"signal":       "os/signal",
	"slog":         "log/slog",
	"strings":      "strings",
	"syscall":      "syscall",
	"time":         "time",
	"mux":          "github.com/gorilla/mux",
	"chatpage":     "github.com/embedkit/embedkit/chatstream/chatpage",
	"chatstream":   "github.com/embedkit/embedkit/chatstream",
	"embedsession": "github.com/embedkit/embedkit/embedsession",
	"memstore":     "github.com/embedkit/embedkit/store/memstore",
	"middleware":   "github.com/embedkit/embedkit/middleware",
	"operator":     "github.com/embedkit/embedkit/store/operator",
	"store":        "github.com/embedkit/embedkit/store",
}

// embedkitPackages are the walkthrough imports that are embedkit's own.
var embedkitPackages = []string{"chatpage", "chatstream", "embedsession", "memstore", "middleware", "operator", "store"}

// walkthroughBlocks returns the Go blocks of the README's section "Add
// embedkit to your server", in order.
func walkthroughBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Add embedkit to your server\n")
	if !ok {
		t.Fatal(`README.md has no section "## Add embedkit to your server"`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var blocks []string
	for {
		_, rest, ok := strings.Cut(section, "\n```go\n")
		if !ok {
			break
		}
		block, after, ok := strings.Cut(rest, "\n```\n")
		if !ok {
			t.Fatal("README.md: a Go block of the walkthrough is not closed")
		}
		blocks = append(blocks, block)
		section = after
	}
	if len(blocks) < 7 {
		t.Fatalf("README.md: %d Go blocks in the walkthrough, want at least 7", len(blocks))
	}
	return blocks
}

var qualified = regexp.MustCompile(`\b([a-z]+)\.[A-Z]`)

// TestReadmeWalkthroughBuilds pastes the Go blocks of the README's
// walkthrough, in order, into a func main, adds the imports they name, and
// builds the program in a module of its own that requires embedkit from
// this checkout (a replace directive): every block must compile as pasted.
// It uses only the module cache (GOPROXY=off), as CI does offline.
func TestReadmeWalkthroughBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program: skipped with -short")
	}
	blocks := walkthroughBlocks(t)
	body := strings.Join(blocks, "\n\n")
	var imports []string
	for _, m := range qualified.FindAllStringSubmatch(body, -1) {
		if path, ok := walkthroughImports[m[1]]; ok && !slices.Contains(imports, path) {
			imports = append(imports, path)
		}
	}
	slices.Sort(imports)
	var src bytes.Buffer
	src.WriteString("// The README's walkthrough, pasted in order.\npackage main\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&src, "\t%q\n", p)
	}
	src.WriteString(")\n\nfunc main() {\n" + body + "\n}\n")
	program, err := format.Source(src.Bytes())
	if err != nil {
		t.Fatalf("the walkthrough does not parse as the body of func main: %v\n%s", err, numbered(src.String()))
	}

	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The program's module requires what embedkit's own go.mod requires,
	// so that its module graph is embedkit's and the module cache that
	// builds embedkit builds it too.
	ownMod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goMod := strings.Replace(string(ownMod), "module github.com/embedkit/embedkit", "module readmewalkthrough", 1) +
		"\nrequire github.com/embedkit/embedkit v0.0.0\n\nreplace github.com/embedkit/embedkit => " + repo + "\n"
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "main.go": program} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"build", "-o", os.DevNull}
	if raceEnabled {
		args = append(args, "-race") // reuses the packages this test was built with
	}
	// go test puts its own go command first in PATH.
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's walkthrough does not build: %v\n%s\nthe program:\n%s", err, out, numbered(string(program)))
	}
}

// TestReadmeWalkthroughMatchesHostapp checks that every line of the
// walkthrough that calls embedkit (a package-qualified name of one of its
// packages) is also in examples/hostapp, which the end-to-end test runs:
// the README shows the calls that are tested. Comments and spacing do not
// count; hostapp's Prefix stands for "/analytics".
func TestReadmeWalkthroughMatchesHostapp(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	host := strings.NewReplacer(`Prefix+"`, `"/analytics`, "Prefix", `"/analytics"`).Replace(string(src))
	hostLines := map[string]bool{}
	for _, l := range strings.Split(host, "\n") {
		hostLines[normalize(l)] = true
	}
	for _, block := range walkthroughBlocks(t) {
		for _, l := range strings.Split(block, "\n") {
			n := normalize(l)
			if n == "" || !callsEmbedkit(n) {
				continue
			}
			if !hostLines[n] {
				t.Errorf("README line %q is not in examples/hostapp/main.go: keep the two in step", strings.TrimSpace(l))
			}
		}
	}
}

func callsEmbedkit(line string) bool {
	for _, m := range qualified.FindAllStringSubmatch(line, -1) {
		if slices.Contains(embedkitPackages, m[1]) {
			return true
		}
	}
	return false
}

// normalize drops a line's comment and collapses its spaces.
func normalize(line string) string {
	if i := strings.Index(line, "//"); i >= 0 && !strings.Contains(line[:i], `"`) {
		line = line[:i]
	}
	return strings.Join(strings.Fields(line), " ")
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%3d %s\n", i+1, l)
	}
	return b.String()
}
