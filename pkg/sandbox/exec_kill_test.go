package sandbox

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/agent/agenttest"
)

// tree is a command's processes as an exec leaves them: the leader of its own session and
// group ("main"), a child in its group, one in a group of its own, and one in a session of its
// own whose child ("grandchild") is found only by parent links. Each notes "PID START" in a
// file of dir; "ready" comes last.
const tree = `
import os, sys, time
d = sys.argv[1]
os.setsid()
def note(kind, pid):
    with open("/proc/%d/stat" % pid) as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    with open(os.path.join(d, kind), "w") as f:
        f.write("%d %s" % (pid, start))
def forever():
    while True:
        time.sleep(1)
def child(fn):
    pid = os.fork()
    if pid == 0:
        fn()
        forever()
    return pid
note("group", child(lambda: None))
note("pgrp", child(lambda: os.setpgid(0, 0)))
r, w = os.pipe()
def session():
    os.setsid()
    os.write(w, b"%d" % child(lambda: None))
note("session", child(session))
note("grandchild", int(os.read(r, 20)))
note("main", os.getpid())
open(os.path.join(d, "ready"), "w").close()
forever()
`

// execKill ends the command's process, its group and session and their descendants, and
// nothing else; a pid that no longer names the command (another start time) is left alone.
func TestExecKillScript(t *testing.T) {
	agenttest.Python3(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash on the host")
	}
	dir := t.TempDir()
	cmd := exec.Command("python3", "-c", tree, dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	other := exec.Command("sleep", "1000")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	otherProc := agenttest.ProcOf(t, "other", other.Process.Pid)
	agenttest.WaitFile(t, filepath.Join(dir, "ready"), "the process tree never came up")
	ps := agenttest.Noted(t, dir, "main", "group", "pgrp", "session", "grandchild")
	main := ps[0]

	run := func(start string) int {
		t.Helper()
		err := exec.Command("bash", "-c", execKill, "sbx-kill", strconv.Itoa(main.Pid), start, "0").Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if code := run(main.Start + "1"); code != 3 {
		t.Errorf("another start time: exit %d, want 3", code)
	}
	for _, p := range ps {
		if !p.Alive() {
			t.Fatalf("the %s process was ended for a pid that named another process", p.Kind)
		}
	}
	if code := run(main.Start); code != 0 {
		t.Errorf("exit %d", code)
	}
	for _, p := range ps {
		agenttest.WaitGone(t, p, fmt.Sprintf("the %s process (%d) outlived the kill", p.Kind, p.Pid))
	}
	if !otherProc.Alive() {
		t.Error("a process of no command's was ended")
	}
}

func TestStatStart(t *testing.T) {
	line := []byte("42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123456 1000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n")
	if got, err := statStart(line); err != nil || got != "123456" {
		t.Errorf("statStart: %q %v", got, err)
	}
	if _, err := statStart([]byte("42 (x")); err == nil {
		t.Error("a cut line was read")
	}
}
