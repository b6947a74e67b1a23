package cmd

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// These tests attack what sbx reads back from a sandbox, from inside a real one: the files
// sbx ps and sbx sh --list read must neither run sbx out of memory nor reach the user's
// terminal, and sbx mcp must answer what it was asked before its input ended.

// hostile holds an OSC that retitles the terminal and a CSI that turns text red.
const hostile = "\x1b]0;pwned\x07\x1b[31mred"

// escapedHostile is how sbx shows it.
const escapedHostile = `\u001b]0;pwned\u0007\u001b[31mred`

// maxRSS is the peak resident memory, in bytes, of a command that has ended. Go starts a
// child as a vfork sharing this test's memory until it execs, and the kernel counts that in
// the child's peak too: so it is at least this test's own peak up to then, and a caller
// compares it with a baseline command run after it.
func maxRSS(t *testing.T, cmd *exec.Cmd) int64 {
	t.Helper()
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		t.Fatal("no rusage for the sbx process")
	}
	return ru.Maxrss << 10 // Linux reports KiB
}

func noControls(t *testing.T, what, s string) {
	t.Helper()
	if strings.ContainsAny(s, "\x1b\x07\u009b") || strings.Contains(s, "\x9b") {
		t.Errorf("%s holds control characters: %q", what, s)
	}
}

// Eight process records whose meta file is one 100 MiB file, linked eight times: sbx ps once
// held all 800 MiB, several times over (3.2 GB at its peak). Now each record's meta is cut
// in the sandbox, the list is capped on the host, and the records show with their command
// unknown.
func TestCLIPsHugeMetaFiles(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-meta"
	plant := `set -e
head -c 100M /dev/zero | tr '\0' x >/tmp/big
mkdir -p -m 1777 /tmp/.sbx-proc
for i in 1 2 3 4 5 6 7 8; do mkdir /tmp/.sbx-proc/big$i; ln /tmp/big /tmp/.sbx-proc/big$i/meta; done`
	if r := c.Run("exec", "-n", name, "--", "bash", "-c", plant); r.Code != 0 {
		t.Fatalf("planting: exit %d: %s", r.Code, r.Stderr)
	}
	cmd := c.Cmd("ps", "-n", name)
	r := c.RunIn(cmd)
	base := c.Cmd("version")
	c.RunIn(base)
	if rss, baseline := maxRSS(t, cmd), maxRSS(t, base); rss > baseline+64<<20 {
		t.Errorf("sbx ps peaked at %d MiB, sbx version at %d MiB", rss>>20, baseline>>20)
	}
	if r.Code != 0 {
		t.Fatalf("sbx ps: exit %d: %s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 9 || len(r.Stdout) > 4<<10 {
		t.Fatalf("sbx ps printed %d lines, %d bytes: %.500q", len(lines), len(r.Stdout), r.Stdout)
	}
	for i, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if f[0] != "big"+string(rune('1'+i)) || f[1] != "?" {
			t.Errorf("row %q", l)
		}
	}
}

// A background command made of escapes, and a record named with one: sbx ps, piped or not,
// prints them escaped; --json keeps the command exact.
func TestCLIPsEscapesCommands(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-psesc"
	if r := c.Run("exec", "-d", "-n", name, "--", "bash", "-c", "sleep 600", hostile); r.Code != 0 {
		t.Fatalf("exec -d: exit %d: %s", r.Code, r.Stderr)
	}
	plant := `d=/tmp/.sbx-proc/$(printf '\033[2J\033]0;x\007') && mkdir "$d" && cp /tmp/.sbx-proc/*/meta "$d/"`
	if r := c.Run("exec", "-n", name, "--", "bash", "-c", plant); r.Code != 0 {
		t.Fatalf("planting: exit %d: %s", r.Code, r.Stderr)
	}
	r := c.Run("ps", "-n", name)
	noControls(t, "sbx ps", r.Stdout+r.Stderr)
	if r.Code != 0 || !strings.Contains(r.Stdout, "'"+escapedHostile+"'") || strings.Count(r.Stdout, "\n") != 2 {
		t.Errorf("sbx ps: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = c.Run("ps", "-n", name, "--json")
	var list []struct{ Command []string }
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || len(list) != 1 || !slices.Equal(list[0].Command, []string{"bash", "-c", "sleep 600", hostile}) {
		t.Errorf("sbx ps --json: %v %q", err, r.Stdout)
	}
}

// A shell session in a directory named with escapes, and a session directory named with
// one: sbx sh --list prints them escaped; --json keeps the directory exact.
func TestCLIShListEscapesDirectories(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-shesc"
	script := `d=/tmp/$(printf '\033]0;pwned\007\033[31mred') && mkdir "$d" && cd "$d" &&
mkdir "/tmp/.sbx-sh/$(printf '\033[2J')" && cp /tmp/.sbx-sh/default/pid "/tmp/.sbx-sh/$(printf '\033[2J')/"`
	if r := c.Run("sh", "-n", name, "-c", script); r.Code != 0 {
		t.Fatalf("sbx sh: exit %d: %s", r.Code, r.Stderr)
	}
	r := c.Run("sh", "-n", name, "--list")
	noControls(t, "sbx sh --list", r.Stdout+r.Stderr)
	if r.Code != 0 || !strings.Contains(r.Stdout, "/tmp/"+escapedHostile) || strings.Count(r.Stdout, "\n") != 2 {
		t.Errorf("sbx sh --list: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = c.Run("sh", "-n", name, "--list", "--json")
	var list []struct{ Session, Cwd string }
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || len(list) != 1 || list[0].Cwd != "/tmp/"+hostile {
		t.Errorf("sbx sh --list --json: %v %q", err, r.Stdout)
	}
}

// A client that writes its requests and closes stdin at once gets every answer: the two of
// the handshake, and one from a tool that first has to create the sandbox.
func TestCLIMCPAnswersBeforeEOF(t *testing.T) {
	c := newCLI(t)
	const handshake = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
`
	const execCall = `{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"exec","arguments":{"command":"echo hi"}}}
`
	for _, tt := range []struct {
		input string
		ids   []string
	}{
		{handshake, []string{"1", "2"}},
		{handshake + execCall, []string{"1", "2", `"three"`}},
	} {
		cmd := c.Cmd("mcp", "-n", cliRun+"-mcpeof")
		cmd.Stdin = strings.NewReader(tt.input)
		r := c.RunIn(cmd)
		if r.Code != 0 {
			t.Fatalf("sbx mcp: exit %d: %s", r.Code, r.Stderr)
		}
		var ids []string
		for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			var msg struct {
				ID     json.RawMessage
				Result *struct {
					Tools             []struct{ Name string }
					StructuredContent *struct{ Stdout string }
				}
			}
			if err := json.Unmarshal([]byte(line), &msg); err != nil || msg.Result == nil {
				t.Fatalf("bad answer %q: %v", line, err)
			}
			ids = append(ids, string(msg.ID))
			switch string(msg.ID) {
			case "2":
				if len(msg.Result.Tools) < 10 {
					t.Errorf("tools/list: %q", line)
				}
			case `"three"`:
				if sc := msg.Result.StructuredContent; sc == nil || sc.Stdout != "hi\n" {
					t.Errorf("exec: %q", line)
				}
			}
		}
		if !slices.Equal(ids, tt.ids) {
			t.Errorf("answered %v, want %v:\n%s", ids, tt.ids, r.Stdout)
		}
	}
}
