package proc

import (
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestParseProcList(t *testing.T) {
	out := strings.Join([]string{
		"b2\t120\t1700000010.500000\t\t\t0\t1\t5\t0\t262144\t" + `{"command":["sleep","100"],"workdir":"/workspace","timeoutMs":2000}`,
		"a1\t101\t1700000000.250000\t143\t1700000004.750000\t1\t0\t0\t0\t262144\t" + `{"command":["bash","-c","echo 'x'"],"user":"0"}`,
		"c3\t\t\t\t\t0\t0\t0\t0\t262144\t" + `not json`,
		"",
	}, "\n")
	list, err := ParseList(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("%d processes", len(list))
	}
	// Oldest first; the one that never recorded a start sorts first.
	c, a, b := list[0], list[1], list[2]
	if a.ID != "a1" || a.State != "exited" || a.ExitCode != 143 || !a.TimedOut || a.PID != 101 || a.User != "0" ||
		strings.Join(a.Command, "|") != "bash|-c|echo 'x'" || a.Duration(time.Now()) != 4500*time.Millisecond {
		t.Errorf("a1: %+v", a)
	}
	if a.Status() != "timed out (exit code 143)" {
		t.Errorf("a1 status: %s", a.Status())
	}
	if b.ID != "b2" || b.State != "running" || b.Timeout != 2*time.Second || b.WorkDir != "/workspace" || b.DroppedStdout != 2*262144 || b.DroppedStderr != 0 ||
		!b.StartedAt.Equal(time.Unix(1700000010, 5e8)) || b.Duration(time.Unix(1700000012, 5e8)) != 2*time.Second || b.Status() != "running" {
		t.Errorf("b2: %+v", b)
	}
	if c.ID != "c3" || c.State != "lost" || c.Command != nil || !strings.HasPrefix(c.Status(), "lost") || c.Duration(time.Now()) != 0 {
		t.Errorf("c3: %+v", c)
	}
	if _, err := ParseList("too\tfew\n"); err == nil {
		t.Error("a short line was accepted")
	}
	// The script lists only directories named as sbx names them; anything else was forged.
	if _, err := ParseList("\x1b[2Jx\t1\t\t\t\t0\t1\t0\t0\t1\t{}\n"); err == nil {
		t.Error("a process ID sbx never makes was accepted")
	}
	if _, err := ParseList(strings.Repeat("x", 1<<20) + "\n"); err == nil || len(err.Error()) > 300 {
		t.Errorf("a long bad line makes a %d-byte error", len(err.Error()))
	}
}

func TestDroppedBytes(t *testing.T) {
	for n, want := range map[string]int64{"0": 0, "3": 0, "4": 10, "9": 60, "": 0, "x": 0} {
		if got := droppedBytes(n, 10); got != want {
			t.Errorf("chunk %q: %d, want %d", n, got, want)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]string{"TERM": "TERM", "sigkill": "KILL", "SIGHUP": "HUP", " int ": "INT", "9": "9", "64": "64", "usr1": "USR1"} {
		if got, err := ParseSignal(in); got != want || err != nil {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, in := range []string{"", "0", "65", "-9", "BOGUS", "TERM; rm -rf /"} {
		if _, err := ParseSignal(in); errs.ExitCode(err) != errs.CodeUsage {
			t.Errorf("%q accepted: %v", in, err)
		}
	}
}

func TestValidProcID(t *testing.T) {
	for _, ok := range []string{"3fa9c1", "A_b-9"} {
		if err := ValidID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "..", "a/b", "a b", "x\x00", strings.Repeat("a", 65)} {
		if err := ValidID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if id := newProcID(); ValidID(id) != nil || len(id) != 6 {
		t.Errorf("generated ID %q", id)
	}
}

func TestEpochTime(t *testing.T) {
	if got := epochTime("1700000000.123456"); !got.Equal(time.Unix(1700000000, 123456000)) {
		t.Errorf("%s", got)
	}
	for _, bad := range []string{"", "x", "-1"} {
		if !epochTime(bad).IsZero() {
			t.Errorf("%q parsed", bad)
		}
	}
}
