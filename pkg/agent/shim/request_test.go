package shim

import (
	"slices"
	"testing"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{Argv: []string{"true"}},
		{Reap: true, TTY: true, Cwd: "/work dir", Argv: []string{"sh", "-c", "echo $X", ""}, Env: []string{"X=1", "", "PATH=/bin"}},
		{Reap: true, Argv: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}},
	} {
		got, ok := parseRequest(r.Encode())
		if !ok || got.reap != r.Reap || got.tty != r.TTY || got.cwd != r.Cwd || !slices.Equal(got.argv, r.Argv) || !slices.Equal(got.env, r.Env) {
			t.Errorf("%+v came back as %+v (%v)", r, got, ok)
		}
	}
}

func TestRequestRefusesWhatEncodeCannotMake(t *testing.T) {
	for _, b := range []string{
		"",
		"0\x00/\x001\x00true",           // not NUL-ended
		"0\x00/\x000\x00",               // no command
		"0\x00/\x002\x00true\x00",       // more arguments than fields
		"4\x00/\x001\x00true\x00",       // an unknown bit
		"x\x00/\x001\x00true\x00",       // not a number
		"1\x00/\x001234567\x00true\x00", // too long a number
		"0\x00/\x00-1\x00true\x00",
	} {
		if r, ok := parseRequest([]byte(b)); ok {
			t.Errorf("%q parsed as %+v", b, r)
		}
	}
}
