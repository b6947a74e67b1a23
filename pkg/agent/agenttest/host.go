// Package agenttest helps tests that run the agent, or what ends a command's processes, on
// the host: the sbx binary (which is the agent), python3 for scripts that make process
// trees, and processes named so that a reused pid is never taken for them.
package agenttest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/internal/testenv"

	"golang.org/x/sys/unix"
)

// Binary is the static sbx binary the tests run (testenv.SbxBinary).
func Binary(t testing.TB) string {
	t.Helper()
	return testenv.SbxBinary(t)
}

// RemoveBinary removes what Binary built, if it built anything.
func RemoveBinary() { testenv.RemoveSbxBinary() }

// Python3 is the host's python3 interpreter itself, not a wrapper that finds it (pyenv's
// shims take most of a second, more than a test's timeout); it skips the test when the host
// has none, unless SBX_REQUIRE_PYTHON3=1 (as in make test), where it fails: CI must not pass
// by skipping the tests that make process trees with it.
func Python3(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	path := strings.TrimSpace(string(out))
	if err != nil || path == "" {
		testenv.Missing(t, "SBX_REQUIRE_PYTHON3", "the host has no python3: %v", err)
	}
	return path
}

// Proc is a process on the host, named by its pid and start time (field 22 of
// /proc/PID/stat) so that a reused pid is never taken for it.
type Proc struct {
	Kind  string
	Pid   int
	Start string
}

// ProcOf names the running process pid.
func ProcOf(t testing.TB, kind string, pid int) Proc {
	t.Helper()
	start, _ := stat(pid)
	if start == "" {
		t.Fatalf("process %d: no start time in /proc", pid)
	}
	return Proc{Kind: kind, Pid: pid, Start: start}
}

// stat is process pid's start time and whether it runs (a zombie does not); "" when it is
// gone.
func stat(pid int) (start string, running bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:])) // the name may hold spaces
	if len(f) < 20 {
		return "", false
	}
	return f[19], f[0] != "Z"
}

// Alive reports whether p still runs.
func (p Proc) Alive() bool {
	start, running := stat(p.Pid)
	return running && start == p.Start
}

// Kill ends p if it is still that process; for what a test leaves running on purpose.
func (p Proc) Kill() {
	if p.Alive() {
		_ = unix.Kill(p.Pid, unix.SIGKILL)
	}
}

// Noted reads the processes a test's script noted in dir, one file each, named after its
// kind: "PID START". They are killed when the test ends.
func Noted(t testing.TB, dir string, kinds ...string) []Proc {
	t.Helper()
	var ps []Proc
	for _, k := range kinds {
		data, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil {
			t.Fatalf("the %s process noted nothing: %v", k, err)
		}
		p := Proc{Kind: k}
		if _, err := fmt.Sscanf(string(data), "%d %s", &p.Pid, &p.Start); err != nil {
			t.Fatalf("%s: %q: %v", k, data, err)
		}
		t.Cleanup(p.Kill)
		ps = append(ps, p)
	}
	return ps
}

// WaitGone waits for p to end; the bound only fails a test whose process never does.
func WaitGone(t testing.TB, p Proc, what string) {
	t.Helper()
	for range 1200 {
		if !p.Alive() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(what)
}

// WaitFile waits for a file a command creates; the bound only fails a test whose command
// never gets there.
func WaitFile(t testing.TB, path, what string) {
	t.Helper()
	for range 600 {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(what)
}

// ServeLoopback runs h for every connection to a listener on the host's loopback, where the
// agent run on the host connects as it does in a sandbox, until the test ends; it returns
// the listener's port.
func ServeLoopback(t testing.TB, h func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				h(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
