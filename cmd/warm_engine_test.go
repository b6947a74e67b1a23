package cmd

import (
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// engineCounter is a Unix socket that passes every connection on to the engine at target
// and counts them: sbx reaches the engine only through it.
type engineCounter struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func newEngineCounter(t *testing.T, target string) *engineCounter {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "docker.sock"))
	if err != nil {
		t.Fatal(err)
	}
	p := &engineCounter{ln: ln}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				e, err := net.Dial("unix", target)
				if err != nil {
					return
				}
				defer e.Close()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(e, c)
					_ = e.(*net.UnixConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, e)
				_ = c.(*net.UnixConn).CloseWrite()
				<-done
			}()
		}
	}()
	return p
}

// A warm exec makes no request to the engine at all, which a counting socket in front of it
// shows (the first exec, which creates the sandbox, is the control that it counts); drift,
// stop, pause, -u and rm with a new sandbox of the same name all take the usual path and
// behave as they did, and the next exec is warm again. A sandbox made with a create flag is
// warm without it, as it is current.
func TestCLIWarmExec(t *testing.T) {
	eng := enginetest.RealEngine(t)
	target, ok := strings.CutPrefix(eng.DaemonHost(), "unix://")
	if !ok {
		t.Skipf("the engine is not on a Unix socket here (%s): no agent, no warm exec", eng.DaemonHost())
	}
	counter := newEngineCounter(t, target)
	c := &cli{clitest.New(t, cliRun, eng, "unix://"+counter.ln.Addr().String())}
	name := cliRun + "-warm-" + randHex(t)
	c.Write(".sbx.yaml", "memory: 512m\n")

	// exec runs cmd in sandbox name; warm says whether it must have made no engine request.
	exec := func(what string, warm bool, args ...string) clitest.Result {
		t.Helper()
		before := counter.conns.Load()
		r := c.Run(append([]string{"--debug", "exec", "-n", name}, args...)...)
		made := counter.conns.Load() - before
		if warm && (made != 0 || !strings.Contains(r.Stderr, "no engine call")) {
			t.Errorf("%s: want a warm exec, without an engine request; %d connections to the engine\n%s", what, made, r)
		}
		if !warm && (made == 0 || !strings.Contains(r.Stderr, "docker api: ")) {
			t.Errorf("%s: want the usual path, through the engine; %d connections to the engine\n%s", what, made, r)
		}
		return r
	}
	ok3 := func(what string, r clitest.Result) {
		t.Helper()
		if r.Code != 3 || r.Stdout != "out\n" || !strings.Contains(r.Stderr, "err\n") {
			t.Errorf("%s: want exit 3 and the command's streams\n%s", what, r)
		}
	}
	cmd := []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}

	r := exec("first exec", false, cmd...)
	ok3("first exec", r)
	if !strings.Contains(r.Stderr, "created sandbox") {
		t.Fatalf("first exec did not create the sandbox\n%s", r)
	}
	ok3("warm exec", exec("warm exec", true, cmd...))
	if r := exec("warm exec -i", true, "-i", "--", "cat"); r.Code != 0 {
		t.Errorf("warm exec -i: %s", r)
	}
	if r := exec("-u", false, "-u", "0", "--", "id", "-u"); r.Code != 0 || r.Stdout != "0\n" {
		t.Errorf("-u 0: %s", r)
	}

	// A changed config: the usual path runs it as it is, warning, every time.
	c.Write(".sbx.yaml", "memory: 768m\n")
	for range 2 {
		r := exec("drifted", false, cmd...)
		ok3("drifted", r)
		if !strings.Contains(r.Stderr, "runs with an older configuration") {
			t.Errorf("drifted: no warning\n%s", r)
		}
	}
	c.Write(".sbx.yaml", "memory: 512m\n")
	ok3("config back", exec("config back", true, cmd...))

	if r := c.Run("stop", name); r.Code != 0 {
		t.Fatalf("stop: %s", r)
	}
	ok3("stopped", exec("stopped", false, cmd...))
	ok3("started again", exec("started again", true, cmd...))

	if r := c.Run("pause", name); r.Code != 0 {
		t.Fatalf("pause: %s", r)
	}
	r = exec("paused", false, cmd...)
	ok3("paused", r)
	if !strings.Contains(r.Stderr, "resuming it") {
		t.Errorf("paused: not resumed\n%s", r)
	}
	ok3("resumed", exec("resumed", true, cmd...))

	// A new sandbox under the same name: its own start, recorded anew.
	if r := c.Run("rm", "-f", name); r.Code != 0 {
		t.Fatalf("rm: %s", r)
	}
	c.Write(".sbx.yaml", "memory: 640m\n")
	r = exec("recreated", false, "--", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "671088640" || !strings.Contains(r.Stderr, "created sandbox") {
		t.Errorf("recreated: want a new sandbox with 640m\n%s", r)
	}
	if r := exec("recreated, warm", true, "--", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"); strings.TrimSpace(r.Stdout) != "671088640" {
		t.Errorf("recreated, warm: %s", r)
	}

	// Made with a flag, run without it: current by Ensure's rule, so warm too.
	if r := c.Run("rm", "-f", name); r.Code != 0 {
		t.Fatalf("rm: %s", r)
	}
	if r := c.Run("create", "-n", name, "--pids-limit", "300"); r.Code != 0 {
		t.Fatalf("create --pids-limit 300: %s", r)
	}
	if r := exec("made with a flag", true, "--", "cat", "/sys/fs/cgroup/pids/pids.max"); strings.TrimSpace(r.Stdout) != "300" {
		t.Errorf("made with a flag: %s", r)
	}
}
