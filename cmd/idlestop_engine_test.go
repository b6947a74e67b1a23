package cmd

import (
	"bufio"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With idleStop, a sandbox stops by itself once unused for that long, never sooner, and not
// while a background process, a port forward or a shell session lives; the next command
// starts it again. ls says when it stops.
func TestCLIIdleStop(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-idle"
	const idle = 5 * time.Second
	if r := c.Run("create", "-n", name, "--idle-stop", "5s"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	state := func() string {
		t.Helper()
		list := c.Containers(name)
		if len(list) != 1 {
			t.Fatalf("%d containers named after %s", len(list), name)
		}
		return list[0].State
	}
	// stoppedAfter waits until the sandbox has stopped and says how long after since.
	stoppedAfter := func(since time.Time) time.Duration {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; {
			if s := state(); s == "exited" {
				return time.Since(since)
			} else if time.Now().After(deadline) {
				t.Fatalf("still %s a minute after its last use", s)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stops := func() (string, *time.Time) {
		t.Helper()
		var list []struct {
			IdleStop   string     `json:"idleStop"`
			IdleStopAt *time.Time `json:"idleStopAt"`
			Stops      string     `json:"stops"`
		}
		r := c.Run("ls", "--json", "--filter", "name="+name)
		if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || len(list) != 1 || list[0].IdleStop != "5s" {
			t.Fatalf("ls --json: %v %s", err, r)
		}
		return list[0].Stops, list[0].IdleStopAt
	}
	// stillRunning checks that the sandbox runs twice idleStop after since: it was in use
	// all along, so any stop would be wrong, however the timing went.
	stillRunning := func(what string, since time.Time) {
		t.Helper()
		time.Sleep(time.Until(since.Add(2 * idle)))
		if s := state(); s != "running" {
			t.Fatalf("the sandbox is %s while %s lives in it", s, what)
		}
		if s, at := stops(); s != "when idle" || at != nil {
			t.Errorf("ls while %s lives in it: stops %q at %v, want \"when idle\"", what, s, at)
		}
	}

	start := time.Now()
	if r := c.Run("exec", "-n", name, "--", "true"); r.Code != 0 {
		t.Fatalf("exec: %s", r)
	}
	// What the command left may take a moment to go ("when idle" until then); once unused,
	// the stop is idleStop after the last use: not before the exec began, and not more than
	// idleStop after ls asked (idleStopAt is cut to the second).
	for deadline := time.Now().Add(time.Minute); ; {
		asked := time.Now()
		s, at := stops()
		if s == "when idle" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if !strings.HasPrefix(s, "in ") || at == nil || at.Before(start.Add(idle-time.Second)) || at.After(time.Now().Add(idle)) {
			t.Errorf("ls of an unused sandbox (asked at %s, exec at %s): stops %q at %v", asked.Format(time.StampMilli), start.Format(time.StampMilli), s, at)
		}
		break
	}
	if took := stoppedAfter(start); took < idle {
		t.Fatalf("stopped %s after its last use, before idleStop", took)
	}
	if s, _ := stops(); s != "-" {
		t.Errorf("ls of the stopped sandbox: stops %q, want -", s)
	}

	// A background process keeps it up; once it is gone, idleStop counts again.
	r := c.Run("exec", "-n", name, "-d", "--", "sleep", "1000")
	if r.Code != 0 {
		t.Fatalf("exec -d after the idle stop: %s", r)
	}
	stillRunning("a background process", time.Now())
	start = time.Now()
	if r := c.Run("kill", "-n", name, strings.TrimSpace(r.Stdout)); r.Code != 0 {
		t.Fatalf("kill: %s", r)
	}
	if took := stoppedAfter(start); took < idle {
		t.Fatalf("stopped %s after the background process ended, before idleStop", took)
	}

	// So does a port forward, with no connection through it: it holds the sandbox's lease.
	r = c.Run("exec", "-n", name, "-d", "--", "sleep", "1000")
	if r.Code != 0 {
		t.Fatalf("exec -d: %s", r)
	}
	fwd := c.Cmd("port-forward", "-n", name, "0:8000")
	out, err := fwd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fwd.Process.Kill(); _ = fwd.Wait() }()
	if url, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("port-forward printed %q (%v)", url, err)
	}
	if r := c.Run("kill", "-n", name, strings.TrimSpace(r.Stdout)); r.Code != 0 {
		t.Fatalf("kill: %s", r)
	}
	stillRunning("a port forward", time.Now())
	start = time.Now()
	_ = fwd.Process.Signal(syscall.SIGINT)
	if err := fwd.Wait(); err != nil {
		t.Errorf("port-forward after SIGINT: %v", err)
	}
	if took := stoppedAfter(start); took < idle {
		t.Fatalf("stopped %s after the port forward ended, before idleStop", took)
	}

	// So does a shell session.
	if r := c.Run("sh", "-n", name, "-c", "cd /tmp"); r.Code != 0 {
		t.Fatalf("sh: %s", r)
	}
	stillRunning("a shell session", time.Now())
}
