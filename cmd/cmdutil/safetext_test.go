package cmdutil

import (
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"plain /tmp/a b.txt":                 "plain /tmp/a b.txt",
		"héllo wörld 日本 🙂 👩‍💻":               "héllo wörld 日本 🙂 👩‍💻",
		"\x1b]0;pwned\x07\x1b[31mred":        `\u001b]0;pwned\u0007\u001b[31mred`, // OSC title, then CSI colour
		"\x1b]8;;http://x\x1b\\link":         `\u001b]8;;http://x\u001b\link`,     // OSC 8 hyperlink, ST
		"\u009b2J\u009d0;t\u009c":            `\u009b2J\u009d0;t\u009c`,           // C1 CSI, OSC, ST as characters
		"a\x9b2Jb\xff":                       `a\x9b2Jb\xff`,                      // raw C1 bytes, not UTF-8
		"tab\tnl\ncr\rdel\x7fnul\x00":        `tab\u0009nl\u000acr\u000ddel\u007fnul\u0000`,
		"\u202eevil.exe\u202c \u2066x\u2069": `\u202eevil.exe\u202c \u2066x\u2069`, // bidi overrides and isolates
		"\u200e\u200f\u061c":                 `\u200e\u200f\u061c`,
		"one\u2028two\u2029three":            `one\u2028two\u2029three`, // line and paragraph separators
		"\ufffd":                             `\ufffd`,
	} {
		got := SafeText(in)
		if got != want {
			t.Errorf("SafeText(%q) = %q, want %q", in, got, want)
		}
		if SafeText(got) != got {
			t.Errorf("SafeText is not idempotent on %q", got)
		}
	}
}

// Every cell of a table may hold text a sandbox chose; none reaches the terminal raw, on a
// terminal or piped.
func TestTableEscapesCells(t *testing.T) {
	for _, tty := range []bool{false, true} {
		ios, _, out, _ := iostreams.Test()
		ios.SetTTY(tty)
		Table{Headers: []string{"ID", "CWD"}, Rows: [][]string{{"a\tb", "/tmp/\x1b]0;pwned\x07\x1b[31mred"}, {"\u202eabc", "/\x9b2J"}}}.Print(ios)
		s := out.String()
		if strings.ContainsAny(s, "\x1b\x07\u202e\u009b") || strings.Contains(s, "\x9b") {
			t.Errorf("tty %v: control characters printed: %q", tty, s)
		}
		for _, want := range []string{`a\u0009b`, `/tmp/\u001b]0;pwned\u0007\u001b[31mred`, `\u202eabc`, `/\x9b2J`} {
			if !strings.Contains(s, want) {
				t.Errorf("tty %v: %q lacks %q", tty, s, want)
			}
		}
		if lines := strings.Count(s, "\n"); lines != 3 {
			t.Errorf("tty %v: %d lines: %q", tty, lines, s)
		}
	}
}
