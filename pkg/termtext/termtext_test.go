package termtext

import "testing"

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                         "plain",
		"50%\r75%\r100%":                "100%",
		"done\r":                        "done",
		"\x1b[1;32mgreen\x1b[0m\ttab":   "green tab",
		"bell\a and \x1b]0;title\a end": "bell and 0;title end",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEllipsis(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 5, "short"},
		{"longer", 5, "long…"},
		{"äöüßé", 4, "äöü…"},
		{"kept whole", 1, "kept whole"},
	} {
		if got := Ellipsis(tt.in, tt.n); got != tt.want {
			t.Errorf("Ellipsis(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
