package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// escapeLiteral matches how Go source spells the ESC byte that begins a terminal escape
// sequence, in interpreted strings and rune literals and in regexps.
var escapeLiteral = regexp.MustCompile(`(?i)\\x1b|\\033|\\u001b|\\U0000001b|\\x\{0*1b\}|\x1b`)

// Terminal drawing belongs to cmd/: no non-test file under pkg/ may spell an escape sequence.
func TestNoTerminalEscapesUnderPkg(t *testing.T) {
	var files int
	err := filepath.WalkDir("pkg", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		files++
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if escapeLiteral.MatchString(line) {
				t.Errorf("%s:%d spells a terminal escape; draw in cmd/ instead: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("found no Go files under pkg/")
	}
}
