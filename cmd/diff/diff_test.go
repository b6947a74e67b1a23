package diff

import (
	"strings"
	"testing"
)

// On a terminal the patch shows what the sandbox wrote without obeying it: C0 and C1
// controls (CSI as U+009B), bidirectional overrides and bytes that are not UTF-8 are escaped,
// even when a write splits a character; tabs and newlines stay.
func TestPrintableEscapes(t *testing.T) {
	var b strings.Builder
	p := &printable{w: &b}
	in := "+ok\tx\n+\x1b[31mred\n+access \u202eevil\u202c level\n+csi \u009b2J\n+bad \xff\n+no newline \u2066"
	for i := 0; i < len(in); i++ { // one byte at a time: characters split across writes
		if _, err := p.Write([]byte{in[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.flush(); err != nil {
		t.Fatal(err)
	}
	want := "+ok\tx\n+\\u001b[31mred\n+access \\u202eevil\\u202c level\n+csi \\u009b2J\n+bad \\xff\n+no newline \\u2066"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
}
