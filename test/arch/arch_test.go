// Package arch checks the layering docs/development.md describes, from the source: what pkg/
// may not do, and that sandbox's lifecycle core knows none of the capabilities built on it.
package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sbx-sandbox/sbx/"

// goFile is one non-test file of a package under pkg/, parsed.
type goFile struct {
	path string // relative to the repository, e.g. pkg/sandbox/exec.go
	pkg  string // its directory, e.g. pkg/sandbox
	ast  *ast.File
}

// pkgFiles parses the non-test files under pkg/, leaving out the test helper packages
// (enginetest, sandboxtest, ...), which may read the environment as the tests' switches do.
func pkgFiles(t *testing.T) []goFile {
	t.Helper()
	root := filepath.Join("..", "..")
	var files []goFile
	err := filepath.WalkDir(filepath.Join(root, "pkg"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasSuffix(d.Name(), "test") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files = append(files, goFile{path: filepath.ToSlash(rel), pkg: filepath.ToSlash(filepath.Dir(rel)), ast: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("only %d files under pkg/: is the walk wrong?", len(files))
	}
	return files
}

func imports(f goFile) []string {
	var out []string
	for _, im := range f.ast.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		out = append(out, p)
	}
	return out
}

// pkg/ returns data and events; cmd/ owns the terminal, the process's streams and the
// environment.
func TestPkgLeavesTheTerminalAndEnvironmentToCmd(t *testing.T) {
	terminal := []string{"golang.org/x/term", "github.com/mattn/go-isatty", "github.com/creack/pty"}
	forbidden := map[string]string{
		"Getenv": "reads the environment", "LookupEnv": "reads the environment", "Environ": "reads the environment",
		"Setenv": "changes the environment", "Stdout": "writes to the terminal", "Stderr": "writes to the terminal", "Stdin": "reads the terminal",
	}
	for _, f := range pkgFiles(t) {
		for _, p := range imports(f) {
			if strings.HasPrefix(p, module+"cmd") {
				t.Errorf("%s imports %s: pkg/ never imports cmd/", f.path, p)
			}
			for _, term := range terminal {
				if p == term {
					t.Errorf("%s imports %s: only cmd/ looks at the terminal", f.path, p)
				}
			}
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" {
				if why, bad := forbidden[sel.Sel.Name]; bad {
					t.Errorf("%s uses os.%s: it %s, which only cmd/ does", f.path, sel.Sel.Name, why)
				}
			}
			return true
		})
	}
}

// The capabilities built on sandbox's lifecycle core need it; it needs none of them.
func TestSandboxCoreKnowsNoCapability(t *testing.T) {
	capabilities := []string{"pkg/proc", "pkg/transfer", "pkg/workspace", "pkg/browser", "pkg/snippet", "pkg/stats", "pkg/mcpserver", "pkg/explain"}
	seen := 0
	for _, f := range pkgFiles(t) {
		if f.pkg != "pkg/sandbox" {
			continue
		}
		seen++
		for _, p := range imports(f) {
			for _, c := range capabilities {
				if p == module+c {
					t.Errorf("%s imports %s: the core knows none of the capabilities on it", f.path, p)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no file of pkg/sandbox")
	}
	for _, c := range capabilities {
		if _, err := os.Stat(filepath.Join("..", "..", c)); err != nil {
			t.Errorf("capability %s: %v (moved? update this list)", c, err)
		}
	}
}
