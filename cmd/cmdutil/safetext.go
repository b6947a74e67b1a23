package cmdutil

import (
	"fmt"
	"strings"
	"unicode"
)

// SafeText makes one line of text that others control (a project file's values, file names)
// harmless on a terminal: control characters (newlines too, which could forge lines) and the bidirectional overrides that reorder what a reader sees
// are shown as \uXXXX escapes instead of acting on the terminal.
func SafeText(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafeRune(r) {
			fmt.Fprintf(&b, "\\u%04x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == unicode.ReplacementChar
}
