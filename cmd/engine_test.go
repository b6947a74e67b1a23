package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// These tests run the real sbx binary against the real engine, as a user would.

// cliRun labels every sandbox these tests create.
var cliRun = clitest.Label("cli")

// cli is sbx for one test of this package, with the helpers only these tests use.
type cli struct{ *clitest.CLI }

func newCLI(t *testing.T) *cli {
	t.Helper()
	return &cli{clitest.New(t, cliRun, enginetest.RealEngine(t), "")}
}

// nonRootUID is the user newCLIAs runs sbx as: no account of that uid exists, so nothing of
// the machine's is its own.
const nonRootUID = 4242

// newCLIAs is newCLI for a user who is not root but is in the docker group (clitest.NewAs).
func newCLIAs(t *testing.T, uid int) *cli {
	t.Helper()
	return &cli{clitest.NewAs(t, cliRun, enginetest.RealEngine(t), uid)}
}

// sleepers lists the sleep commands in sandbox name, but for the sandbox's own "sleep infinity".
func (c *cli) sleepers(name string) string {
	c.T.Helper()
	var out []string
	for _, l := range c.Running(name, "sleep ") {
		if l != "sleep infinity " {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestCLIExec(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "# project root marker\n")
	c.Write("src/x.py", "import os\nprint('x.py in', os.getcwd())\n")
	r := c.Run("exec", "--", "python3", "-c", "print(6*7)")
	if r.Code != 0 || r.Stdout != "42\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	var ls []map[string]any
	if err := json.Unmarshal([]byte(c.Run("ls", "--json", "--filter", "project="+c.Project).Stdout), &ls); err != nil || len(ls) != 1 {
		t.Fatalf("ls --json: %v %v", ls, err)
	}
	id := ls[0]["id"]

	r = c.Run("exec", "--", "python3", "-c", "print(6*7)")
	if r.Code != 0 || strings.Contains(r.Stderr, "created") {
		t.Errorf("second exec: exit %d stderr %q", r.Code, r.Stderr)
	}
	_ = json.Unmarshal([]byte(c.Run("ls", "--json", "--filter", "project="+c.Project).Stdout), &ls)
	if len(ls) != 1 || ls[0]["id"] != id {
		t.Errorf("the second exec did not reuse the container: %v", ls)
	}

	if r = c.Run("exec", "--", "sh", "-c", "exit 3"); r.Code != 3 {
		t.Errorf("exit 3: got %d (%s)", r.Code, r.Stderr)
	}
	if r = c.Run("exec", "--", "sh", "-c", "echo out; echo err >&2"); r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("streams mixed: stdout %q stderr %q", r.Stdout, r.Stderr)
	}
	if r = c.Run("exec", "--", "no-such-cmd"); r.Code != 127 || !strings.Contains(r.Stderr, "no-such-cmd: command not found") {
		t.Errorf("missing command: %d %q", r.Code, r.Stderr)
	}

	cmd := c.Cmd("exec", "-i", "--", "wc", "-l")
	cmd.Stdin = strings.NewReader("a\nb\nc\n")
	if r = c.RunIn(cmd); r.Code != 0 || strings.TrimSpace(r.Stdout) != "3" {
		t.Errorf("-i: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}

	cmd = c.Cmd("exec", "--", "python3", "x.py")
	cmd.Dir = filepath.Join(c.Project, "src")
	if r = c.RunIn(cmd); r.Stdout != "x.py in /workspace/src\n" {
		t.Errorf("cd src && sbx exec python3 x.py: %q %q", r.Stdout, r.Stderr)
	}
	if r = c.Run("exec", "--", "sh", "-c", `echo "${SBX_HOST_MARKER:-absent}"`); r.Stdout != "absent\n" {
		t.Errorf("host environment leaked: %q", r.Stdout)
	}
	if r = c.Run("exec", "-e", "SBX_HOST_MARKER", "-e", "X=1", "--", "sh", "-c", `echo "$SBX_HOST_MARKER $X"`); r.Stdout != c.Marker+" 1\n" {
		t.Errorf("-e: %q %q", r.Stdout, r.Stderr)
	}
}

func TestCLIExecTTY(t *testing.T) {
	c := newCLI(t)
	if r := c.Run("create"); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	cmd := c.Cmd("exec", "-it", "--", "bash", "-c", "tty; stty size; read -r line; echo got:$line")
	term := c.StartOnTerminal(cmd, 40, 100)
	time.Sleep(500 * time.Millisecond)
	_, _ = term.Write([]byte("hello\r"))
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("exec -it: %v\n%s", err, term.Output())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("exec -it hung:\n%s", term.Output())
	}
	s := term.Closed()
	for _, want := range []string{"/dev/pts/", "40 100", "got:hello"} {
		if !strings.Contains(s, want) {
			t.Errorf("tty output lacks %q:\n%q", want, s)
		}
	}
}

func TestCLITimeoutAndInterrupt(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-stop"
	r := c.Run("exec", "-n", name, "--timeout", "2s", "--", "sh", "-c", "sleep 100 & sleep 100")
	if r.Code != 124 || r.Took > 10*time.Second || !strings.Contains(r.Stderr, "timed out after 2s") {
		t.Errorf("timeout: exit %d after %s, stderr %q", r.Code, r.Took, r.Stderr)
	}
	if s := c.sleepers(name); s != "" {
		t.Errorf("left running after timeout:\n%s", s)
	}

	cmd := c.Cmd("exec", "-n", name, "--", "sh", "-c", "sleep 100 & sleep 100")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50 && c.sleepers(name) == ""; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 130 || time.Since(start) > 10*time.Second {
		t.Errorf("SIGINT: %v after %s, stderr %q", err, time.Since(start), errb.String())
	}
	if s := c.sleepers(name); s != "" {
		t.Errorf("left running after SIGINT:\n%s", s)
	}
}

func TestCLIConcurrentFirstExec(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-race"
	var wg sync.WaitGroup
	results := make([]clitest.Result, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.Run("exec", "-n", name, "--", "echo", "ok")
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.Code != 0 || r.Stdout != "ok\n" {
			t.Errorf("exec %d: exit %d stdout %q stderr %q", i, r.Code, r.Stdout, r.Stderr)
		}
	}
	if n := len(c.Containers(name)); n != 1 {
		t.Errorf("%d containers named %s, want 1", n, sandbox.ContainerName(name))
	}
}

func TestCLIConfigChange(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "memory: 512m\n")
	if r := c.Run("create"); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	c.Write(".sbx.yaml", "memory: 768m\n")
	r := c.Run("ls", "--filter", "project="+c.Project)
	if !strings.Contains(r.Stdout, "changed") {
		t.Errorf("ls does not show the change:\n%s", r.Stdout)
	}
	r = c.Run("create")
	if r.Code != 125 || !strings.Contains(r.Stderr, "memory") || !strings.Contains(r.Stderr, "--replace") {
		t.Errorf("create over a changed config: exit %d stderr %q", r.Code, r.Stderr)
	}
	if r = c.Run("create", "--replace"); r.Code != 0 || !strings.Contains(r.Stdout, "replaced") {
		t.Fatalf("create --replace: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if r = c.Run("exec", "--", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"); strings.TrimSpace(r.Stdout) != fmt.Sprint(768<<20) {
		t.Errorf("memory limit inside: %q %q", r.Stdout, r.Stderr)
	}
	if r = c.Run("ls", "--filter", "project="+c.Project); !strings.Contains(r.Stdout, "\tok") {
		t.Errorf("ls after replace:\n%s", r.Stdout)
	}
}

func TestCLIPrune(t *testing.T) {
	c := newCLI(t)
	prefix := cliRun + "-p"
	for _, n := range []string{"old", "new"} {
		if r := c.Run("create", "-n", prefix+"-"+n); r.Code != 0 {
			t.Fatalf("create: %s", r.Stderr)
		}
	}
	// Age one sandbox through its state file, as a day without use would.
	state := &sandbox.StateStore{Dir: filepath.Join(c.Home, ".state", "sbx"), Now: time.Now}
	if err := state.SetLastUsed(prefix+"-old", time.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// A container that is not sbx's but looks like one must survive.
	ctx := context.Background()
	impostor := sandbox.ContainerName(prefix + "-impostor")
	resp, err := c.Eng.ContainerCreate(ctx, &container.Config{Image: images.SandboxTag,
		Labels: map[string]string{enginetest.TestLabel: cliRun, sandbox.LabelName: prefix + "-impostor"}}, &container.HostConfig{}, nil, nil, impostor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Eng.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true}) })

	filter := "name=" + prefix + "-*"
	r := c.Run("prune", "--filter", filter)
	if r.Code != 2 || !strings.Contains(r.Stderr, "-f") {
		t.Errorf("prune without -f and no terminal: exit %d stderr %q", r.Code, r.Stderr)
	}
	r = c.Run("prune", "--dry-run", "--filter", filter)
	if r.Code != 0 || !strings.Contains(r.Stdout, "would remove "+prefix+"-old (idle 2d > 24h)") || strings.Contains(r.Stdout, prefix+"-new") {
		t.Errorf("dry run: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	r = c.Run("prune", "-f", "--filter", filter)
	if r.Code != 0 || !strings.Contains(r.Stdout, "removed "+prefix+"-old") {
		t.Errorf("prune -f: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if len(c.Containers(prefix+"-old")) != 0 || len(c.Containers(prefix+"-new")) != 1 {
		t.Error("prune removed the wrong sandboxes")
	}
	if _, err := c.Eng.ContainerInspect(ctx, impostor); err != nil {
		t.Errorf("prune touched a container without the managed label: %v", err)
	}
	if r = c.Run("prune", "-f", "--all", "--json", "--filter", filter); r.Code != 0 || !strings.Contains(r.Stdout, `"name": "`+prefix+`-new"`) {
		t.Errorf("prune --all --json: %q %q", r.Stdout, r.Stderr)
	}
	if r = c.Run("rm", prefix+"-gone", prefix+"-new"); r.Code != 1 || !strings.Contains(r.Stderr, `sandbox "`+prefix+`-gone" not found`) {
		t.Errorf("rm of a missing name: %d %q", r.Code, r.Stderr)
	}
}

// Flags given to create stick to the sandbox: later commands without them see no change.
func TestCLICreateFlagsAreRemembered(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-flags"
	if r := c.Run("create", "-n", name, "--memory", "600m", "--env", "FROM_FLAG=1"); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	if r := c.Run("ls", "--filter", "name="+name); !strings.Contains(r.Stdout, "\tok") {
		t.Errorf("ls reports a change for flags given at create:\n%s", r.Stdout)
	}
	r := c.Run("exec", "-n", name, "--", "sh", "-c", "echo $FROM_FLAG")
	if r.Code != 0 || r.Stdout != "1\n" || strings.Contains(r.Stderr, "older configuration") {
		t.Errorf("exec: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if r = c.Run("create", "-n", name); r.Code != 0 || !strings.Contains(r.Stdout, "ready") {
		t.Errorf("create without the flags: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	// A real change in the project file is still seen, and measured against the flags.
	c.Write(".sbx.yaml", "pidsLimit: 300\n")
	r = c.Run("ls", "--json", "--filter", "name="+name)
	if !strings.Contains(r.Stdout, `"changedKeys": [`) || !strings.Contains(r.Stdout, `"pidsLimit"`) || strings.Contains(r.Stdout, `"memory"`) {
		t.Errorf("ls after a file change: %s", r.Stdout)
	}
}

// TestCLINonRoot runs sbx as a user in the docker group, not root: the state directory, the
// agent's socket and the workspace work with that user's permissions.
func TestCLINonRoot(t *testing.T) {
	c := newCLIAs(t, nonRootUID)
	c.Write("hello.txt", "hi\n")
	r := c.Run("exec", "--", "sh", "-c", "id -u; cat /workspace/hello.txt")
	if r.Code != 0 || r.Stdout != "1000\nhi\n" {
		t.Fatalf("exec as uid %d: code %d, stdout %q, stderr %s", nonRootUID, r.Code, r.Stdout, r.Stderr)
	}
	if r := c.Run("rm", "-f"); r.Code != 0 {
		t.Fatalf("rm: %s", r.Stderr)
	}
}

// prune keeps a sandbox with a command in flight unless --busy, expires each sandbox by its
// own prune settings, and keeps what this user's sbx never used.
func TestCLIPruneRespectsLeasesAndOwners(t *testing.T) {
	c := newCLI(t)
	prefix := cliRun + "-pb"
	state := &sandbox.StateStore{Dir: filepath.Join(c.Home, ".state", "sbx"), Now: time.Now}
	filter := "name=" + prefix + "-*"

	// A sandbox with a command in flight, idle for two days by its record.
	busy := prefix + "-busy"
	cmd := c.Cmd("exec", "-n", busy, "--", "sh", "-c", "echo started; exec sleep 600")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("the command did not start: %q %v", line, err)
	}
	if err := state.SetLastUsed(busy, time.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}

	// A sandbox whose own project keeps sandboxes three days, idle for two.
	keep := prefix + "-keep"
	c.Write("keeper/.sbx.yaml", "prune:\n  idleHours: 72\n")
	create := c.Cmd("create", "-n", keep)
	create.Dir = filepath.Join(c.Project, "keeper")
	if r := c.RunIn(create); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	if err := state.SetLastUsed(keep, time.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}

	// Another user's sandbox: made through another state directory, never used from here.
	other := newCLI(t)
	theirs := prefix + "-theirs"
	if r := other.Run("create", "-n", theirs); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}

	r := c.Run("prune", "-f", "--json", "--filter", filter)
	var rep struct {
		Removed, Busy, NotOurs []struct{ Name, Reason string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || r.Code != 0 {
		t.Fatalf("prune --json: exit %d, %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	if len(rep.Removed) != 0 || len(rep.Busy) != 1 || rep.Busy[0].Name != busy || len(rep.NotOurs) != 1 || rep.NotOurs[0].Name != theirs {
		t.Errorf("prune: removed %v, busy %v, not ours %v", rep.Removed, rep.Busy, rep.NotOurs)
	}
	// Even a rule that expires everything keeps what this user never used.
	if r := c.Run("prune", "-f", "--idle", "1ms", "--filter", "name="+theirs); r.Code != 0 || strings.Contains(r.Stdout, "removed") ||
		!strings.Contains(r.Stderr, "kept 1 sandboxes this user's sbx never used") {
		t.Errorf("prune --idle 1ms of another user's sandbox: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, n := range []string{busy, keep, theirs} {
		if len(c.Containers(n)) != 1 {
			t.Errorf("prune removed %s", n)
		}
	}
	if r := c.Run("prune", "-f", "--filter", filter); !strings.Contains(r.Stderr, "kept "+busy+": a command is in flight (--busy removes it anyway)") {
		t.Errorf("prune text: %s", r.Stderr)
	}

	r = c.Run("prune", "-f", "--busy", "--filter", filter)
	if r.Code != 0 || !strings.Contains(r.Stdout, "removed "+busy) || len(c.Containers(busy)) != 0 || len(c.Containers(keep)) != 1 {
		t.Errorf("prune --busy: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := other.Run("rm", "-f", theirs); r.Code != 0 {
		t.Errorf("rm: %s", r.Stderr)
	}
}
