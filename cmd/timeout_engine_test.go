package cmd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/internal/clitest"
)

// A command may kill any process of the sandbox user, its watchdog included; these tests
// check that its timeout holds all the same, through the agent and through the engine's
// exec (-u forces it: the agent runs commands only as the sandbox's user).

// viaPaths are the ways a command reaches the sandbox, with the flags that choose each.
var viaPaths = []struct {
	name string
	args []string
}{{"agent", nil}, {"engine-exec", []string{"-u", "1000"}}}

// killAround says how the command came ("ppid N": 0 through the engine's exec), then kills
// every process it sees but pid 1, itself and the sandbox's main process (the agent, or the
// keep-alive without one), naming the watchdog when it kills it, and says "ready" before it
// sleeps. With $1 "all" it kills the main process last, once what it printed has left its
// stdout (once the agent is dead, nothing more gets out).
const killAround = `me=$$ main=; echo "ppid $PPID"
for d in /proc/[0-9]*; do
	p=${d#/proc/}
	{ [ "$p" = 1 ] || [ "$p" = "$me" ]; } && continue
	c=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
	case $c in
	"/run/sbx-agent-bin/sbx __agent "* | "sleep infinity ") main=$p ;;
	*sbx-watch*) kill -KILL "$p" 2>/dev/null && echo "killed watchdog" ;;
	*) kill -KILL "$p" 2>/dev/null ;;
	esac
done
if [ "$1" = all ]; then
	echo "killing the main process $main"
	python3 -c 'import array, fcntl, os, sys, termios, time
n = array.array("i", [0])
for _ in range(3000):
    fcntl.ioctl(1, termios.FIONREAD, n)
    if n[0] == 0:
        break
    time.sleep(0.01)
os.kill(int(sys.argv[1]), 9)' "$main"
fi
echo ready; exec sleep 1000`

// killWatchdog kills the command's own watchdog, when it has one (through the engine's exec;
// its arguments start with the command's pid), ignores TERM from then on, as do its
// children, and says "ready" before it sleeps for $1.
const killWatchdog = `me=$$
for d in /proc/[0-9]*; do
	case $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) in *"sbx-watch $me "*) kill -KILL "${d#/proc/}" && echo "killed watchdog" ;; esac
done
trap '' TERM; echo ready; sleep "$1"; :`

// bound is the longest a timed-out command may keep sbx: its timeout and grace, and 5 s for
// the rest.
func bound(timeout time.Duration) time.Duration { return timeout + 5*time.Second + 5*time.Second }

// runWithin is c.run, but kills sbx after limit (exit code -1): a deadline that only fails a
// test whose sbx would otherwise wait on.
func (c *cli) runWithin(limit time.Duration, args ...string) clitest.Result {
	c.T.Helper()
	cmd := c.Cmd(args...)
	kill := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	defer kill.Stop()
	return c.RunIn(cmd)
}

// checkPath fails the test when the output's "ppid N" line says the command did not come the
// way via names.
func checkPath(t *testing.T, via, stdout string) {
	t.Helper()
	if engine := strings.HasPrefix(stdout, "ppid 0\n"); !strings.HasPrefix(stdout, "ppid ") || engine != (via == "engine-exec") {
		t.Fatalf("want the command through the %s: stdout %q", via, stdout)
	}
}

// checkWatchdog fails the test unless the command killed its watchdog through the engine's
// exec, and found none through the agent, which ends commands itself and starts none, and
// then said it was ready.
func checkWatchdog(t *testing.T, via, stdout string) {
	t.Helper()
	if killed := strings.Contains(stdout, "killed watchdog\n"); killed != (via == "engine-exec") || !strings.Contains(stdout, "ready\n") {
		t.Fatalf("through the %s, want a watchdog killed only through the engine's exec, then ready: stdout %q", via, stdout)
	}
}

// runKillAround runs killAround with mode in a new sandbox name, with a 2 s timeout, the
// way via names, and checks that it came that way.
func runKillAround(t *testing.T, c *cli, name string, via []string, viaName, mode string) clitest.Result {
	t.Helper()
	if r := c.Run("create", "-n", name); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	r := c.runWithin(time.Minute, append(append([]string{"exec", "-n", name, "--timeout", "2s"}, via...), "--", "bash", "-c", killAround, "sbx-test", mode)...)
	checkPath(t, viaName, r.Stdout)
	return r
}

// A command that kills every process it can see but the agent, its watchdog included (the
// engine's exec has one), still ends at its timeout, and sbx exits 124 within timeout +
// grace + 5 s.
func TestCLITimeoutSurvivesKilledWatchdog(t *testing.T) {
	c := newCLI(t)
	for _, via := range viaPaths {
		t.Run(via.name, func(t *testing.T) {
			name := cliRun + "-kw-" + via.name
			r := runKillAround(t, c, name, via.args, via.name, "agent")
			checkWatchdog(t, via.name, r.Stdout)
			if r.Code != 124 || r.Took > bound(2*time.Second) || !strings.Contains(r.Stderr, "timed out after 2s") {
				t.Errorf("want exit 124 within %s: exit %d after %s, stderr %q", bound(2*time.Second), r.Code, r.Took, r.Stderr)
			}
			if s := c.sleepers(name); s != "" {
				t.Errorf("left running after the timeout:\n%s", s)
			}
		})
	}
}

// A command that kills the agent too stops the sandbox: sbx says so and exits 125 at once.
func TestCLIKilledAgentStopsSandbox(t *testing.T) {
	c := newCLI(t)
	for _, via := range viaPaths {
		t.Run(via.name, func(t *testing.T) {
			name := cliRun + "-ka-" + via.name
			r := runKillAround(t, c, name, via.args, via.name, "all")
			if !strings.Contains(r.Stdout, "killing the main process") {
				t.Fatalf("the command did not kill the agent: stdout %q stderr %q", r.Stdout, r.Stderr)
			}
			if r.Code != 125 || r.Took > bound(2*time.Second) || !strings.Contains(r.Stderr, "stopped while the command ran") {
				t.Errorf("want exit 125 saying the sandbox stopped, within %s: exit %d after %s, stderr %q", bound(2*time.Second), r.Code, r.Took, r.Stderr)
			}
			// Its main process ended by the KILL: init passes on 128+9.
			if ctrs := c.Containers(name); len(ctrs) != 1 || !strings.HasPrefix(ctrs[0].Status, "Exited (137)") {
				t.Errorf("the sandbox after the command: %+v", ctrs)
			}
		})
	}
}

// A command that stops the agent (SIGSTOP) after killing its watchdog is ended by sbx
// itself, 2 s after its timeout and grace, and the agent gets CONT and serves again.
func TestCLIStoppedAgentIsBackstopped(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-stop-agent"
	script := "kill -STOP $PPID; " + killWatchdog
	r := c.runWithin(time.Minute, "exec", "-n", name, "--timeout", "2s", "--", "bash", "-c", script, "sbx-test", "1005")
	if limit := bound(2*time.Second) + 2*time.Second; r.Code != 124 || r.Took > limit || !strings.Contains(r.Stderr, "timed out after 2s") {
		t.Errorf("want exit 124 within %s: exit %d after %s, stdout %q stderr %q", limit, r.Code, r.Took, r.Stdout, r.Stderr)
	}
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", "echo ppid $PPID"); r.Code != 0 || r.Stdout == "ppid 0\n" || !strings.HasPrefix(r.Stdout, "ppid ") {
		t.Errorf("the next command, which the agent should run: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if s := c.sleepers(name); s != "" {
		t.Errorf("left running after the timeout:\n%s", s)
	}
}

// startReady starts cmd and returns what its stdout said once it says "ready"; the rest is
// read and dropped. The deadline only fails a test whose command never gets there.
func startReady(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var said strings.Builder
		for sc.Scan() {
			said.WriteString(sc.Text() + "\n")
			if sc.Text() == "ready" {
				ready <- said.String()
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		ready <- ""
	}()
	select {
	case said := <-ready:
		if said == "" {
			_ = cmd.Wait()
			t.Fatalf("%v ended before it was ready", cmd.Args)
		}
		return said
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("%v never said it was ready", cmd.Args)
	}
	return ""
}

// Ending a timed-out command never ends another's processes: a background process and a
// command running meanwhile in the same sandbox go on after a command that killed its
// watchdog and ignores TERM was ended at its timeout.
func TestCLITimeoutSparesOtherExecs(t *testing.T) {
	c := newCLI(t)
	for _, via := range viaPaths {
		t.Run(via.name, func(t *testing.T) {
			name := cliRun + "-sp-" + via.name
			bg := c.Run(append(append([]string{"exec", "-n", name, "-d"}, via.args...), "--", "sleep", "1001")...)
			id := strings.TrimSpace(bg.Stdout)
			if bg.Code != 0 || id == "" {
				t.Fatalf("exec -d: exit %d %q", bg.Code, bg.Stderr)
			}
			other := c.Cmd(append(append([]string{"exec", "-n", name}, via.args...), "--", "sh", "-c", "echo ready; exec sleep 1002")...)
			startReady(t, other)
			otherDone := make(chan error, 1)
			go func() { otherDone <- other.Wait() }()
			defer func() {
				_ = other.Process.Signal(syscall.SIGINT)
				<-otherDone
			}()

			r := c.runWithin(time.Minute, append(append([]string{"exec", "-n", name, "--timeout", "2s"}, via.args...), "--", "bash", "-c", killWatchdog, "sbx-test", "1003")...)
			checkWatchdog(t, via.name, r.Stdout)
			if r.Code != 124 {
				t.Fatalf("want the command to time out: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
			}
			s := c.sleepers(name)
			if strings.Contains(s, "sleep 1003") || !strings.Contains(s, "sleep 1001") || !strings.Contains(s, "sleep 1002") {
				t.Errorf("want sleep 1001 and 1002 running, 1003 ended:\n%s", s)
			}
			var ps []struct{ ID, State string }
			if err := json.Unmarshal([]byte(c.Run("ps", "-n", name, "--json").Stdout), &ps); err != nil || len(ps) != 1 || ps[0].ID != id || ps[0].State != "running" {
				t.Errorf("the background process after the timeout: %+v %v", ps, err)
			}
			select {
			case err := <-otherDone:
				t.Errorf("the command running meanwhile ended: %v", err)
				otherDone <- err
			default:
			}
		})
	}
}

// When sbx is killed, the agent ends its command, which has no watchdog (the engine's exec
// has one, which watches for sbx going away too), with -i or without. Through the engine's
// exec nothing but the watchdog is left to do it (see the README).
func TestCLIKilledSbxEndsCommand(t *testing.T) {
	c := newCLI(t)
	for _, interactive := range []bool{false, true} {
		t.Run(fmt.Sprintf("interactive=%v", interactive), func(t *testing.T) {
			name := fmt.Sprintf("%s-gone-%v", cliRun, interactive)
			args := []string{"exec", "-n", name}
			if interactive {
				args = append(args, "-i")
			}
			cmd := c.Cmd(append(args, "--", "bash", "-c", killWatchdog, "sbx-test", "1004")...)
			if interactive {
				w, err := cmd.StdinPipe() // kept open: sbx, not its input, goes away
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			checkWatchdog(t, "agent", startReady(t, cmd))
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			// The deadline only fails a command that is never ended.
			for deadline := time.Now().Add(time.Minute); strings.Contains(c.sleepers(name), "sleep 1004"); {
				if time.Now().After(deadline) {
					t.Fatal("the command went on after sbx was killed")
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}

// The MCP exec tool gives the same guarantee: a timed-out result, within timeout + grace + 5 s.
func TestCLIMCPTimeoutSurvivesKilledWatchdog(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-mcpkw"
	cs := c.mcpSession(c.Project, "-n", name)
	var eo struct {
		Stdout   string
		ExitCode int
		TimedOut bool
	}
	start := time.Now()
	res := mcpCall(t, cs, "exec", map[string]any{"command": killAround, "timeoutSeconds": 2}, &eo)
	took := time.Since(start)
	checkWatchdog(t, "agent", eo.Stdout)
	if res.IsError || !eo.TimedOut || took > bound(2*time.Second) {
		t.Errorf("want a timed-out result within %s: after %s %+v %s", bound(2*time.Second), took, eo, resultText(res))
	}
	if s := c.sleepers(name); s != "" {
		t.Errorf("left running after the timeout:\n%s", s)
	}
}
