// Package scripttest checks the scripts a package runs inside sandboxes (its scripts/*.sh):
// each is embedded by a //go:embed line of the package, so none goes stale unseen, and starts
// with its header, the shell for shellcheck and then what runs it.
package scripttest

import (
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// CheckEmbedded checks the scripts of the package whose tests run in the current directory.
func CheckEmbedded(t *testing.T) {
	t.Helper()
	var patterns []string
	goFiles, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range goFiles {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				if rest, ok := strings.CutPrefix(c.Text, "//go:embed "); ok {
					patterns = append(patterns, strings.Fields(rest)...)
				}
			}
		}
	}
	scripts, err := filepath.Glob("scripts/*.sh")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, name := range scripts {
		embedded := false
		for _, p := range patterns {
			if ok, _ := path.Match(p, filepath.ToSlash(name)); ok {
				embedded = true
			}
		}
		if !embedded {
			t.Errorf("%s: no //go:embed line names it", name)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.SplitN(string(b), "\n", 3); len(lines) < 3 || lines[0] != "# shellcheck shell=bash" || !strings.HasPrefix(lines[1], "# ") {
			t.Errorf("%s does not start with its header", name)
		}
	}
}
