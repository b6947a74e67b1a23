// Package termtext shapes text that sbx did not write (a build log, a sandbox's messages)
// into what a terminal would show of it, fit for an error message or a progress line.
package termtext

import (
	"strings"
	"unicode/utf8"

	"github.com/sbx-sandbox/sbx/internal/lazyre"
)

// esc begins a terminal escape sequence, which Clean removes. Code under pkg/ never writes
// one (layout_test.go looks for escape literals there); this only reads them, so the byte is
// named by its number.
const esc = string(rune(0x1b))

var ansiEscape = lazyre.New(esc + `\[[0-9;?]*[ -/]*[@-~]|` + esc + `[@-_]`)

// Clean keeps what a terminal would show of a line: the text after its last carriage
// return, without escape sequences or other control characters; tabs become spaces.
func Clean(s string) string {
	s = strings.TrimRight(s, "\r")
	if i := strings.LastIndexByte(s, '\r'); i >= 0 {
		s = s[i+1:]
	}
	s = ansiEscape().ReplaceAllString(s, "")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case r < 0x20 || r == 0x7f:
			return -1
		}
		return r
	}, s)
}

// Ellipsis shortens s to n runes, ending it with "…" when it cuts.
func Ellipsis(s string, n int) string {
	if n <= 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
