package adversarial_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// 50 execs at once on one sandbox: every one gets its own output, error stream and exit
// code, none another's.
func TestLoadConcurrentExec(t *testing.T) {
	faultsGroup.start(t)
	s := newSBX(t)
	name := sandboxName("load")
	if r := s.Run("create", "-n", name); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	var cmds []*exec.Cmd
	for i := range 50 {
		cmds = append(cmds, s.Cmd("exec", "-n", name, "--", "bash", "-c", `echo "out $1"; echo "err $1" >&2; exit $(($1 % 7))`, "sbx-load", fmt.Sprint(i)))
	}
	for i, r := range clitest.Concurrently(cmds) {
		if r.Code != i%7 || r.Stdout != fmt.Sprintf("out %d\n", i) || r.Stderr != fmt.Sprintf("err %d\n", i) {
			t.Errorf("exec %d: want exit %d with its own output: %s", i, i%7, r)
		}
	}
}

// 20 creates of one name at once: the engine's name conflict decides who creates, and every
// caller succeeds with the same container.
func TestLoadConcurrentCreate(t *testing.T) {
	faultsGroup.start(t)
	s := newSBX(t)
	name := sandboxName("same")
	var cmds []*exec.Cmd
	for range 20 {
		cmds = append(cmds, s.Cmd("create", "-n", name, "--json"))
	}
	ids, created := map[string]bool{}, 0
	for i, r := range clitest.Concurrently(cmds) {
		var out struct{ ID, Action string }
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &out) != nil {
			t.Errorf("create %d: %s", i, r)
			continue
		}
		ids[out.ID] = true
		if out.Action == "created" {
			created++
		}
	}
	if list := s.Containers(name); len(list) != 1 || len(ids) != 1 || created != 1 {
		t.Errorf("%d containers, %d distinct ids reported, %d callers saying created; want 1 of each", len(list), len(ids), created)
	}
}

// sbx killed at any point of a create leaves nothing the next command cannot use: no second
// container, no stuck state, no unreadable state file.
func TestFaultKilledDuringCreate(t *testing.T) {
	sc := faultsGroup.start(t)
	for _, mode := range []string{"ro", "none"} {
		t.Run("workspace "+mode, func(t *testing.T) {
			sc.case_(t)
			s := newSBX(t)
			s.Write(".sbx.yaml", "workspace: "+mode+"\n")
			name := sandboxName("kill-create-" + mode)
			seen := map[string]int{}
			// Fixed delays land before, between and after the engine calls on a quiet host;
			// "appears" kills the moment the engine shows the container. Whatever state each
			// kill leaves, the next command must recover from it.
			for _, delay := range []string{"0ms", "5ms", "10ms", "15ms", "20ms", "30ms", "50ms", "appears"} {
				cmd := s.Cmd("create", "-n", name)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				if delay == "appears" {
					waitFor(t, 30*time.Second, func() bool { return len(s.Containers(name)) > 0 })
				} else {
					d, _ := time.ParseDuration(delay)
					time.Sleep(d)
				}
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
				state := "none"
				if list := s.Containers(name); len(list) == 1 {
					state = list[0].State
				}
				seen[state]++
				r := s.Run("exec", "-n", name, "--", "echo", "ok")
				if r.Code != 0 || r.Stdout != "ok\n" {
					t.Fatalf("after a kill %s into create (left: %s), exec: %s", delay, state, r)
				}
				if list := s.Containers(name); len(list) != 1 || list[0].State != "running" {
					t.Fatalf("after a kill %s into create: %d containers", delay, len(list))
				}
				stateFileParses(t, s, name)
				if r := s.Run("rm", "-f", name); r.Code != 0 {
					t.Fatalf("rm: %s", r)
				}
			}
			t.Logf("states the kills left: %v", seen)
		})
	}
}

// stateFileParses checks that sandbox name's last-use file is whole.
func stateFileParses(t *testing.T, s *clitest.CLI, name string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.Home, ".state", "sbx", name+".json"))
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("state file %q: %v", data, err)
	}
}

// sbx killed while its command runs: the next command works and the killed command's
// processes do not live on. Without -i the watchdog reads sbx's end of stdin and ends the
// command when it closes. With -i stdin belongs to the command, so the watchdog cannot see
// sbx go; the sandbox's agent can and terminates the command, and without an agent the
// timeout still bounds how long the processes survive.
func TestFaultKilledDuringExec(t *testing.T) {
	sc := faultsGroup.start(t)
	s := newSBX(t)
	name := sandboxName("kill-exec")
	if r := s.Run("create", "-n", name); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	for _, tc := range []struct {
		label string
		args  []string
		gone  time.Duration // how soon after the kill the processes must be gone
	}{
		{"exec", []string{"exec", "-n", name, "--", "bash", "-c", "sleep 4343 & sleep 4343"}, 10 * time.Second},
		{"exec -i with a 3s timeout", []string{"exec", "-i", "-n", name, "--timeout", "3s", "--", "bash", "-c", "sleep 4343 & sleep 4343"},
			3*time.Second + sandbox.KillGrace + 10*time.Second},
	} {
		t.Run(tc.label, func(t *testing.T) {
			sc.case_(t)
			s := s.In(t)
			cmd := s.Cmd(tc.args...)
			stdin, err := cmd.StdinPipe() // held open: sbx, not its input, goes away
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, func() bool { return len(s.Running(name, "sleep 4343")) == 2 })
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			killed := time.Now()
			if r := s.Run("exec", "-n", name, "--", "echo", "ok"); r.Code != 0 || r.Stdout != "ok\n" {
				t.Errorf("the next exec: %s", r)
			}
			waitFor(t, tc.gone, func() bool { return len(s.Running(name, "sleep 4343")) == 0 })
			t.Logf("processes gone %s after the kill", time.Since(killed).Round(100*time.Millisecond))
		})
	}
}

// A stopped engine: every command that needs it fails at once with exit 125, saying it
// cannot reach the engine and what to do. The endpoints are a socket path with nothing
// behind it, a socket file nobody listens on, a closed port on loopback, and (bounded by
// sbx's connect timeout instead) a socket that accepts but never answers.
func TestFaultEngineStopped(t *testing.T) {
	sc := faultsGroup.start(t)
	dir := t.TempDir()

	refused := filepath.Join(dir, "refused.sock")
	l, err := net.Listen("unix", refused)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()

	hung := filepath.Join(dir, "hung.sock")
	hl, err := net.Listen("unix", hung)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hl.Close() })
	go func() {
		for {
			c, err := hl.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }() // read, never answer
		}
	}()

	closedPort := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()

	endpoints := []struct {
		label, host string
		within      time.Duration
	}{
		{"missing socket", "unix://" + filepath.Join(dir, "missing.sock"), 5 * time.Second},
		{"socket nobody listens on", "unix://" + refused, 5 * time.Second},
		{"closed loopback port", "tcp://" + closedPort, 5 * time.Second},
		{"engine that never answers", "unix://" + hung, engine.ConnectTimeout + 5*time.Second},
	}
	for _, ep := range endpoints {
		t.Run(ep.label, func(t *testing.T) {
			s := newSBXOn(t, noEngine{}, ep.host)
			engineDownCases(t, sc, s, ep.within)
		})
	}
}

// engineDownCases runs every engine command against the dead engine s points at, all at
// once (a hung engine makes each wait for sbx's connect timeout), then judges each.
func engineDownCases(t *testing.T, sc *scope, s *clitest.CLI, within time.Duration) {
	// browser is denied by the default tool policy before it would ask the engine.
	allowAll := filepath.Join(t.TempDir(), "allow-all.yaml")
	writeFile(t, allowAll, "tools: {allow: [\"*\"], deny: []}\n")
	cases := deadEngineCommands(sandboxName("down"), allowAll, t.TempDir())
	t.Run("every command is covered", func(t *testing.T) {
		sc.case_(t)
		covered := map[string]bool{}
		for _, c := range cases {
			covered[c.args[0]] = true
		}
		for _, c := range engineFreeCommands {
			covered[c] = true
		}
		for _, c := range subcommands(t, s.In(t)) {
			if !covered[c] {
				t.Errorf("sbx %s is not in the dead-engine table: add what it must do when the engine is gone", c)
			}
		}
	})
	var cmds []*exec.Cmd
	for _, tc := range cases {
		cmd := s.Cmd(tc.args...)
		cmd.Stdin = strings.NewReader("")
		cmds = append(cmds, cmd)
	}
	results := clitest.Concurrently(cmds)
	for i, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			sc.case_(t)
			r := results[i]
			out := r.Stdout + r.Stderr
			if r.Code != tc.code || r.Took > within || !strings.Contains(out, tc.says) || !strings.Contains(out, tc.hint) {
				t.Errorf("want exit %d within %s saying %q and %q: %s", tc.code, within, tc.says, tc.hint, r)
			}
		})
	}
}

type deadEngineCommand struct {
	args       []string
	code       int
	says, hint string
}

// engineFreeCommands never talk to the engine (trust reads files only), or (mcp) serve a protocol that reports an
// engine failure in the answer to each tool call rather than by exiting.
var engineFreeCommands = []string{"completion", "config", "help", "mcp", "trust"}

// deadEngineCommands lists every command that talks to the engine and what it must do
// when the engine is gone: 125 and the hint, except doctor, which reports a failed check
// (exit 1) with its fix, and explain, which reports the engine as a fact and succeeds.
func deadEngineCommands(name, allowAll, dir string) []deadEngineCommand {
	const says, hint = "cannot reach the Docker engine", "hint: start the engine at "
	fail := func(args ...string) deadEngineCommand {
		return deadEngineCommand{args: args, code: 125, says: says, hint: hint}
	}
	return []deadEngineCommand{
		fail("exec", "-n", name, "--", "true"),
		fail("run", "-n", name, "--lang", "python", "-c", "print(1)"),
		// --rm claims a sandbox name before it finds the engine gone: the same answer.
		fail("exec", "--rm", "--", "true"),
		fail("run", "--rm", "--lang", "python", "-c", "print(1)"),
		fail("create", "-n", name),
		fail("cp", name+":/tmp/x", dir),
		fail("cp", allowAll, name+":/tmp/"),
		fail("ls"),
		fail("ps", "-n", name),
		fail("logs", "-n", name, "abc123"),
		fail("kill", "-n", name, "abc123"),
		fail("stop", name),
		fail("pause", name),
		fail("resume", name),
		fail("stats"),
		fail("stats", name, "--json"),
		fail("sh", "-n", name, "-c", "true"),
		fail("sh", "-n", name, "--list"),
		fail("rm", "-f", name),
		fail("diff", "-n", name),
		fail("apply", "-n", name),
		fail("discard", "-n", name),
		fail("sync", "-n", name),
		fail("checkpoint", "-n", name, "one"),
		fail("checkpoint", "ls", "-n", name),
		fail("rollback", "-n", name, "one"),
		fail("prune", "-f"),
		fail("pool", "fill", "-n", name),
		fail("pool", "ls"),
		fail("pool", "drain", "--all"),
		fail("version"),
		fail("image", "ls"),
		fail("image", "build"),
		fail("image", "prune"),
		fail("browser", "--config", allowAll),
		fail("egress", "allow", name, "example.org"),
		fail("egress", "deny", name, "example.org"),
		fail("port-forward", "-n", name, "0:8000"),
		// The log is a file on this machine: it is read without the engine.
		{args: []string{"egress", "log", name}, code: 1, says: "has no egress log", hint: "hint: only a sandbox with egress rules"},
		{args: []string{"doctor"}, code: 1, says: "not reachable", hint: "fix: start Docker"},
		{args: []string{"explain", name}, code: 0, says: "not reachable: cannot reach the Docker engine", hint: "Engine"},
	}
}

// subcommands lists sbx's top-level commands as its help prints them.
func subcommands(t *testing.T, s *clitest.CLI) []string {
	t.Helper()
	r := s.Run("help")
	// The commands are listed under their groups' headings ("Running code:", ...), each
	// line "  NAME  what it does"; the other headings hold usage, examples and flags.
	var out []string
	listing := false
	for _, l := range strings.Split(r.Stdout, "\n") {
		switch {
		case l != "" && !strings.HasPrefix(l, " ") && strings.HasSuffix(l, ":"):
			listing = !slices.Contains([]string{"Usage:", "Aliases:", "Examples:", "Flags:", "Global Flags:"}, l)
		case listing && strings.HasPrefix(l, "  "):
			out = append(out, strings.Fields(l)[0])
		}
	}
	if len(out) < 10 {
		t.Fatalf("no command list in sbx help (found %q): %s", out, r)
	}
	return out
}

// noEngine stands in for the engine of a test whose engine is dead on purpose: there is
// nothing to clean up on it. Any other call panics on the nil Engine.
type noEngine struct{ engine.Engine }

func (noEngine) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	return nil, nil
}

func (noEngine) VolumeList(context.Context, volume.ListOptions) (volume.ListResponse, error) {
	return volume.ListResponse{}, nil
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", limit)
		}
	}
}
