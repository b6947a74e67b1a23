package sandbox

import (
	"bytes"
	"testing"
)

func TestCapWriter(t *testing.T) {
	var b bytes.Buffer
	w := &CapWriter{W: &b, Limit: 5}
	for _, s := range []string{"ab", "cd", "efg", "hij"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d %v", s, n, err)
		}
	}
	if b.String() != "abcde" || w.Written() != 10 || !w.Truncated() {
		t.Errorf("kept %q of %d, truncated %v", b.String(), w.Written(), w.Truncated())
	}
	w = &CapWriter{W: &b, Limit: 10}
	_, _ = w.Write([]byte("0123456789"))
	if w.Truncated() {
		t.Error("exactly the limit is not truncated")
	}
}
