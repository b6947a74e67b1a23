package proc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/proc"
)

func TestSplitTrailer(t *testing.T) {
	const mk = "sbx-0123456789abcdef0123456789abcdef"
	for _, tt := range []struct {
		name, in, out string
		fields        map[string]string
		ok            bool
	}{
		{"plain", "hello\n" + mk + " rc=0 to=0\n", "hello\n", map[string]string{"rc": "0", "to": "0"}, true},
		{"output without a newline", "$ " + mk + " rc=3\n", "$ ", map[string]string{"rc": "3"}, true},
		{"a bare number", "42\n" + mk + " rc=0\n", "42\n", map[string]string{"rc": "0"}, true},
		{"no output", mk + " busy=1\n", "", map[string]string{"busy": "1"}, true},
		{"the marker printed earlier too", mk + " rc=9\nx" + mk + " rc=1\n", mk + " rc=9\nx", map[string]string{"rc": "1"}, true},
		{"binary", "\x00\xff\n" + mk + " rc=0\n", "\x00\xff\n", map[string]string{"rc": "0"}, true},
		{"missing", "output\n", "output\n", nil, false},
		{"not at the end", mk + " rc=0\nmore\n", mk + " rc=0\nmore\n", nil, false},
		{"cut short", "x" + mk + " rc=0", "x" + mk + " rc=0", nil, false},
		{"another marker", "x" + mk + "ff rc=0\n", "x" + mk + "ff rc=0\n", nil, false},
	} {
		out, fields, ok := proc.SplitTrailer([]byte(tt.in), []byte(mk))
		if string(out) != tt.out || ok != tt.ok || len(fields) != len(tt.fields) {
			t.Errorf("%s: %q %v %v", tt.name, out, fields, ok)
			continue
		}
		for k, v := range tt.fields {
			if fields[k] != v {
				t.Errorf("%s: %s=%q, want %q", tt.name, k, fields[k], v)
			}
		}
	}
}

func TestShellLines(t *testing.T) {
	line, sync, init := proc.ShellLines("/tmp/.sbx-sh/default", "c-1", "sbx-mk")
	status := `\builtin printf "%s sbx-mk\n" "$?" >>/tmp/.sbx-sh/default/c-1.st`
	if want := `PROMPT_COMMAND='` + status + `'; \builtin \. /tmp/.sbx-sh/default/c-1.sh </dev/null >/tmp/.sbx-sh/default/c-1.out 2>/tmp/.sbx-sh/default/c-1.err; ` + status; line != want {
		t.Errorf("line\n%s\nwant\n%s", line, want)
	}
	if want := `\builtin printf "%s sbx-mk\n" 130 >>/tmp/.sbx-sh/default/c-1.st`; sync != want {
		t.Errorf("sync %s", sync)
	}
	if !strings.HasPrefix(init, "PS1= ") || !strings.HasSuffix(init, ">/tmp/.sbx-sh/default/pid.new") || strings.Contains(line+sync+init, "\n") {
		t.Errorf("init %s", init)
	}
}

func TestParseShellList(t *testing.T) {
	list, err := proc.ParseSessions("default\tidle\t42\t1764504000.250000\t1764504100\t/workspace/src\nb\texited\t7\t1764504000.000000\t\t\n")
	if err != nil || len(list) != 2 {
		t.Fatalf("%+v %v", list, err)
	}
	d := list[0]
	if d.Name != "default" || d.State != "idle" || d.PID != 42 || d.Cwd != "/workspace/src" ||
		!d.StartedAt.Equal(time.Unix(1764504000, 250000000)) || !d.LastUsed.Equal(time.Unix(1764504100, 0)) {
		t.Errorf("%+v", d)
	}
	if b := list[1]; b.State != "exited" || !b.LastUsed.IsZero() || b.Cwd != "" {
		t.Errorf("%+v", b)
	}
	if _, err := proc.ParseSessions("short\tline\n"); err == nil {
		t.Error("a short line was accepted")
	}
	if _, err := proc.ParseSessions("\x1b[2J\tidle\t1\t\t\t/\n"); err == nil {
		t.Error("a session name sbx never makes was accepted")
	}
	if _, err := proc.ParseSessions(strings.Repeat("x", 1<<20) + "\n"); err == nil || len(err.Error()) > 300 {
		t.Errorf("a long bad line makes a %d-byte error", len(err.Error()))
	}
}

func TestValidSession(t *testing.T) {
	for _, ok := range []string{"default", "build-2", "a_b", strings.Repeat("x", 64)} {
		if err := proc.ValidSession(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", strings.Repeat("x", 65), "é"} {
		if err := proc.ValidSession(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
