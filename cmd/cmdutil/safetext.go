package cmdutil

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SafeText makes one line of text that others control (a project file's values, file names,
// what a sandbox wrote) harmless on a terminal. Control characters, C0 and C1 (so every
// escape sequence, and newlines, which could forge lines), the bidirectional overrides that
// reorder what a reader sees, and the line and paragraph separators are shown as \uXXXX;
// bytes that are not UTF-8 (a raw C1 byte among them) as \xXX. Escaping its result again
// changes nothing.
func SafeText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unsafeRune(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// SafeLines is SafeText for text of several lines, such as an error message: its newlines
// stay.
func SafeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = SafeText(l)
	}
	return strings.Join(lines, "\n")
}

func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029' || r == unicode.ReplacementChar
}
