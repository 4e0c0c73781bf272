package layouttest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/embedkit/embedkit"

// TestExamplesUsePublicAPI fails when code meant to be copied into a host's
// own module imports an internal package, which Go forbids outside this
// module: every non-test Go file under examples/, and every test file that
// holds an Example function (example_test.go or any other).
func TestExamplesUsePublicAPI(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		isTest := strings.HasSuffix(rel, "_test.go")
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(rel, "examples/") && !isTest:
		case isTest && (strings.HasSuffix(rel, "example_test.go") || hasExample(f)):
		default:
			return nil
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == module+"/internal" || strings.HasPrefix(p, module+"/internal/") {
				t.Errorf("%s imports %s: examples must use the public API only", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked %d files: the walk missed the examples", checked)
	}
}

// hasExample reports whether f declares an Example function.
func hasExample(f *ast.File) bool {
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
			return true
		}
	}
	return false
}
