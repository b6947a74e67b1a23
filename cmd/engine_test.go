package cmd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// These tests run the real sbx binary against the real engine, as a user would.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	cliRun    = func() string { b := make([]byte, 3); _, _ = rand.Read(b); return "cli" + hex.EncodeToString(b) }()
)

func sbxBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbx-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "sbx")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/sbx-sandbox/sbx").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type cli struct {
	t       *testing.T
	eng     engine.Engine
	bin     string
	home    string
	project string
	env     []string
	// cred runs sbx as another user (newCLIAs); nil runs it as the test's own user.
	cred *syscall.Credential
}

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	return setupCLI(t, &cli{t: t, bin: sbxBinary(t), home: t.TempDir(), project: t.TempDir()})
}

// nonRootUID is the user newCLIAs runs sbx as: no account of that uid exists, so nothing of
// the machine's is its own.
const nonRootUID = 4242

// newCLIAs is newCLI for a user who is not root but is in the docker group, as most people
// run sbx: root hides permission mistakes. Its home and project belong to that user, and
// files the test writes with c.write are given to it. Only root can run such a test.
func newCLIAs(t *testing.T, uid int) *cli {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("running sbx as uid %d needs root", uid)
	}
	grp, err := user.LookupGroup("docker")
	if err != nil {
		t.Fatalf("the docker group (its members may use the engine's socket): %v", err)
	}
	gid, _ := strconv.Atoi(grp.Gid)
	// t.TempDir's parents are private to root, so this user's directories live elsewhere.
	base, err := os.MkdirTemp("", "sbx-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	bin := filepath.Join(base, "sbx")
	if err := copyFile(sbxBinary(t), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cli{t: t, bin: bin, home: filepath.Join(base, "home"), project: filepath.Join(base, "project"),
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{uint32(gid)}}}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{c.home, c.project} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return setupCLI(t, c)
}

func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode)
}

func setupCLI(t *testing.T, c *cli) *cli {
	t.Helper()
	eng := enginetest.RealEngine(t)
	c.eng = eng
	if err := os.Chmod(c.project, 0o755); err != nil {
		t.Fatal(err)
	}
	c.env = append(os.Environ(),
		"HOME="+c.home, "XDG_CONFIG_HOME="+filepath.Join(c.home, ".config"), "XDG_STATE_HOME="+filepath.Join(c.home, ".state"),
		"SBX_TEST_LABEL="+cliRun, "NO_COLOR=1", "SBX_HOST_MARKER=leaked")
	t.Cleanup(func() {
		list, err := eng.ContainerList(context.Background(), container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+cliRun))})
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, ctr := range list {
			// A test may run sbx from a subdirectory that is a project of its own.
			if !strings.HasPrefix(ctr.Labels[sandbox.LabelProject], c.project) {
				continue
			}
			if r := c.run("rm", "-f", ctr.Labels[sandbox.LabelName]); r.code != 0 {
				t.Errorf("cleanup: sbx rm -f %s: %s", ctr.Labels[sandbox.LabelName], r.stderr)
			}
		}
	})
	return c
}

func (c *cli) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(c.bin, args...)
	cmd.Dir, cmd.Env = c.project, c.env
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

// chown gives p (a file or directory the test made) to the user sbx runs as.
func (c *cli) chown(p string) {
	c.t.Helper()
	if c.cred == nil {
		return
	}
	if err := os.Lchown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cli) runIn(cmd *exec.Cmd) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	cmd.Stderr = &errb
	start := time.Now()
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("running sbx %v: %v", cmd.Args, err)
	}
	return res
}

func (c *cli) run(args ...string) result { c.t.Helper(); return c.runIn(c.cmd(args...)) }

func (c *cli) write(name, content string) {
	c.t.Helper()
	p := filepath.Join(c.project, name)
	c.mkdirAll(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.chown(p)
}

// trust trusts the project's .sbx.yaml as it is now, as a user does after reviewing it.
func (c *cli) trust() {
	c.t.Helper()
	if r := c.run("trust", "--yes"); r.code != 0 {
		c.t.Fatalf("sbx trust --yes: exit %d, %s", r.code, r.stderr)
	}
}

// mkdirAll makes dir and its missing parents, each owned by the user sbx runs as.
func (c *cli) mkdirAll(dir string) {
	c.t.Helper()
	if _, err := os.Stat(dir); err == nil {
		return
	}
	c.mkdirAll(filepath.Dir(dir))
	if err := os.Mkdir(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	c.chown(dir)
}

func (c *cli) containers(name string) []container.Summary {
	c.t.Helper()
	list, err := c.eng.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("name", "^/"+sandbox.ContainerName(name)+"$"))})
	if err != nil {
		c.t.Fatal(err)
	}
	return list
}

func (c *cli) sleepers(name string) string {
	c.t.Helper()
	r := c.run("exec", "-n", name, "--", "bash", "-c", `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' <$p/cmdline 2>/dev/null) && echo "$c"; done`)
	var out []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "sleep ") && l != "sleep infinity " {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestCLIExec(t *testing.T) {
	c := newCLI(t)
	c.write(".sbx.yaml", "# project root marker\n")
	c.write("src/x.py", "import os\nprint('x.py in', os.getcwd())\n")
	r := c.run("exec", "--", "python3", "-c", "print(6*7)")
	if r.code != 0 || r.stdout != "42\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	var ls []map[string]any
	if err := json.Unmarshal([]byte(c.run("ls", "--json", "--filter", "project="+c.project).stdout), &ls); err != nil || len(ls) != 1 {
		t.Fatalf("ls --json: %v %v", ls, err)
	}
	id := ls[0]["id"]

	r = c.run("exec", "--", "python3", "-c", "print(6*7)")
	if r.code != 0 || strings.Contains(r.stderr, "created") {
		t.Errorf("second exec: exit %d stderr %q", r.code, r.stderr)
	}
	_ = json.Unmarshal([]byte(c.run("ls", "--json", "--filter", "project="+c.project).stdout), &ls)
	if len(ls) != 1 || ls[0]["id"] != id {
		t.Errorf("the second exec did not reuse the container: %v", ls)
	}

	if r = c.run("exec", "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Errorf("exit 3: got %d (%s)", r.code, r.stderr)
	}
	if r = c.run("exec", "--", "sh", "-c", "echo out; echo err >&2"); r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("streams mixed: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r = c.run("exec", "--", "no-such-cmd"); r.code != 127 || !strings.Contains(r.stderr, "no-such-cmd: command not found") {
		t.Errorf("missing command: %d %q", r.code, r.stderr)
	}

	cmd := c.cmd("exec", "-i", "--", "wc", "-l")
	cmd.Stdin = strings.NewReader("a\nb\nc\n")
	if r = c.runIn(cmd); r.code != 0 || strings.TrimSpace(r.stdout) != "3" {
		t.Errorf("-i: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}

	cmd = c.cmd("exec", "--", "python3", "x.py")
	cmd.Dir = filepath.Join(c.project, "src")
	if r = c.runIn(cmd); r.stdout != "x.py in /workspace/src\n" {
		t.Errorf("cd src && sbx exec python3 x.py: %q %q", r.stdout, r.stderr)
	}
	if r = c.run("exec", "--", "sh", "-c", `echo "${SBX_HOST_MARKER:-absent}"`); r.stdout != "absent\n" {
		t.Errorf("host environment leaked: %q", r.stdout)
	}
	if r = c.run("exec", "-e", "SBX_HOST_MARKER", "-e", "X=1", "--", "sh", "-c", `echo "$SBX_HOST_MARKER $X"`); r.stdout != "leaked 1\n" {
		t.Errorf("-e: %q %q", r.stdout, r.stderr)
	}
}

func TestCLIExecTTY(t *testing.T) {
	c := newCLI(t)
	if r := c.run("create"); r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	cmd := c.cmd("exec", "-it", "--", "bash", "-c", "tty; stty size; read -r line; echo got:$line")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&out, ptmx); close(done) }()
	time.Sleep(500 * time.Millisecond)
	_, _ = ptmx.Write([]byte("hello\r"))
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("exec -it: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("exec -it hung:\n%s", out.String())
	}
	<-done
	s := out.String()
	for _, want := range []string{"/dev/pts/", "40 100", "got:hello"} {
		if !strings.Contains(s, want) {
			t.Errorf("tty output lacks %q:\n%q", want, s)
		}
	}
}

func TestCLITimeoutAndInterrupt(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-stop"
	r := c.run("exec", "-n", name, "--timeout", "2s", "--", "sh", "-c", "sleep 100 & sleep 100")
	if r.code != 124 || r.took > 10*time.Second || !strings.Contains(r.stderr, "timed out after 2s") {
		t.Errorf("timeout: exit %d after %s, stderr %q", r.code, r.took, r.stderr)
	}
	if s := c.sleepers(name); s != "" {
		t.Errorf("left running after timeout:\n%s", s)
	}

	cmd := c.cmd("exec", "-n", name, "--", "sh", "-c", "sleep 100 & sleep 100")
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
	results := make([]result, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.run("exec", "-n", name, "--", "echo", "ok")
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 || r.stdout != "ok\n" {
			t.Errorf("exec %d: exit %d stdout %q stderr %q", i, r.code, r.stdout, r.stderr)
		}
	}
	if n := len(c.containers(name)); n != 1 {
		t.Errorf("%d containers named %s, want 1", n, sandbox.ContainerName(name))
	}
}

func TestCLIConfigChange(t *testing.T) {
	c := newCLI(t)
	c.write(".sbx.yaml", "memory: 512m\n")
	if r := c.run("create"); r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	c.write(".sbx.yaml", "memory: 768m\n")
	r := c.run("ls", "--filter", "project="+c.project)
	if !strings.Contains(r.stdout, "changed") {
		t.Errorf("ls does not show the change:\n%s", r.stdout)
	}
	r = c.run("create")
	if r.code != 125 || !strings.Contains(r.stderr, "memory") || !strings.Contains(r.stderr, "--replace") {
		t.Errorf("create over a changed config: exit %d stderr %q", r.code, r.stderr)
	}
	if r = c.run("create", "--replace"); r.code != 0 || !strings.Contains(r.stdout, "replaced") {
		t.Fatalf("create --replace: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = c.run("exec", "--", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"); strings.TrimSpace(r.stdout) != fmt.Sprint(768<<20) {
		t.Errorf("memory limit inside: %q %q", r.stdout, r.stderr)
	}
	if r = c.run("ls", "--filter", "project="+c.project); !strings.Contains(r.stdout, "\tok") {
		t.Errorf("ls after replace:\n%s", r.stdout)
	}
}

func TestCLIPrune(t *testing.T) {
	c := newCLI(t)
	prefix := cliRun + "-p"
	for _, n := range []string{"old", "new"} {
		if r := c.run("create", "-n", prefix+"-"+n); r.code != 0 {
			t.Fatalf("create: %s", r.stderr)
		}
	}
	// Age one sandbox through its state file, as a day without use would.
	state := &sandbox.StateStore{Dir: filepath.Join(c.home, ".state", "sbx"), Now: time.Now}
	if err := state.SetLastUsed(prefix+"-old", time.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// A container that is not sbx's but looks like one must survive.
	ctx := context.Background()
	impostor := sandbox.ContainerName(prefix + "-impostor")
	resp, err := c.eng.ContainerCreate(ctx, &container.Config{Image: images.SandboxTag,
		Labels: map[string]string{enginetest.TestLabel: cliRun, sandbox.LabelName: prefix + "-impostor"}}, &container.HostConfig{}, nil, nil, impostor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.eng.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true}) })

	filter := "name=" + prefix + "-*"
	r := c.run("prune", "--filter", filter)
	if r.code != 2 || !strings.Contains(r.stderr, "-f") {
		t.Errorf("prune without -f and no terminal: exit %d stderr %q", r.code, r.stderr)
	}
	r = c.run("prune", "--dry-run", "--filter", filter)
	if r.code != 0 || !strings.Contains(r.stdout, "would remove "+prefix+"-old (idle 2d > 24h)") || strings.Contains(r.stdout, prefix+"-new") {
		t.Errorf("dry run: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = c.run("prune", "-f", "--filter", filter)
	if r.code != 0 || !strings.Contains(r.stdout, "removed "+prefix+"-old") {
		t.Errorf("prune -f: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if len(c.containers(prefix+"-old")) != 0 || len(c.containers(prefix+"-new")) != 1 {
		t.Error("prune removed the wrong sandboxes")
	}
	if _, err := c.eng.ContainerInspect(ctx, impostor); err != nil {
		t.Errorf("prune touched a container without the managed label: %v", err)
	}
	if r = c.run("prune", "-f", "--all", "--json", "--filter", filter); r.code != 0 || !strings.Contains(r.stdout, `"name": "`+prefix+`-new"`) {
		t.Errorf("prune --all --json: %q %q", r.stdout, r.stderr)
	}
	if r = c.run("rm", prefix+"-gone", prefix+"-new"); r.code != 1 || !strings.Contains(r.stderr, `sandbox "`+prefix+`-gone" not found`) {
		t.Errorf("rm of a missing name: %d %q", r.code, r.stderr)
	}
}

// Flags given to create stick to the sandbox: later commands without them see no change.
func TestCLICreateFlagsAreRemembered(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-flags"
	if r := c.run("create", "-n", name, "--memory", "600m", "--env", "FROM_FLAG=1"); r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	if r := c.run("ls", "--filter", "name="+name); !strings.Contains(r.stdout, "\tok") {
		t.Errorf("ls reports a change for flags given at create:\n%s", r.stdout)
	}
	r := c.run("exec", "-n", name, "--", "sh", "-c", "echo $FROM_FLAG")
	if r.code != 0 || r.stdout != "1\n" || strings.Contains(r.stderr, "older configuration") {
		t.Errorf("exec: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = c.run("create", "-n", name); r.code != 0 || !strings.Contains(r.stdout, "ready") {
		t.Errorf("create without the flags: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// A real change in the project file is still seen, and measured against the flags.
	c.write(".sbx.yaml", "pidsLimit: 300\n")
	r = c.run("ls", "--json", "--filter", "name="+name)
	if !strings.Contains(r.stdout, `"changedKeys": [`) || !strings.Contains(r.stdout, `"pidsLimit"`) || strings.Contains(r.stdout, `"memory"`) {
		t.Errorf("ls after a file change: %s", r.stdout)
	}
}

// TestCLINonRoot runs sbx as a user in the docker group, not root: the state directory, the
// agent's socket and the workspace work with that user's permissions.
func TestCLINonRoot(t *testing.T) {
	c := newCLIAs(t, nonRootUID)
	c.write("hello.txt", "hi\n")
	r := c.run("exec", "--", "sh", "-c", "id -u; cat /workspace/hello.txt")
	if r.code != 0 || r.stdout != "1000\nhi\n" {
		t.Fatalf("exec as uid %d: code %d, stdout %q, stderr %s", nonRootUID, r.code, r.stdout, r.stderr)
	}
	if r := c.run("rm", "-f"); r.code != 0 {
		t.Fatalf("rm: %s", r.stderr)
	}
}

// prune keeps a sandbox with a command in flight unless --busy, expires each sandbox by its
// own prune settings, and keeps what this user's sbx never used.
func TestCLIPruneRespectsLeasesAndOwners(t *testing.T) {
	c := newCLI(t)
	prefix := cliRun + "-pb"
	state := &sandbox.StateStore{Dir: filepath.Join(c.home, ".state", "sbx"), Now: time.Now}
	filter := "name=" + prefix + "-*"

	// A sandbox with a command in flight, idle for two days by its record.
	busy := prefix + "-busy"
	cmd := c.cmd("exec", "-n", busy, "--", "sh", "-c", "echo started; exec sleep 600")
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
	c.write("keeper/.sbx.yaml", "prune:\n  idleHours: 72\n")
	create := c.cmd("create", "-n", keep)
	create.Dir = filepath.Join(c.project, "keeper")
	if r := c.runIn(create); r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	if err := state.SetLastUsed(keep, time.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}

	// Another user's sandbox: made through another state directory, never used from here.
	other := newCLI(t)
	theirs := prefix + "-theirs"
	if r := other.run("create", "-n", theirs); r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}

	r := c.run("prune", "-f", "--json", "--filter", filter)
	var rep struct {
		Removed, Busy, NotOurs []struct{ Name, Reason string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("prune --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if len(rep.Removed) != 0 || len(rep.Busy) != 1 || rep.Busy[0].Name != busy || len(rep.NotOurs) != 1 || rep.NotOurs[0].Name != theirs {
		t.Errorf("prune: removed %v, busy %v, not ours %v", rep.Removed, rep.Busy, rep.NotOurs)
	}
	// Even a rule that expires everything keeps what this user never used.
	if r := c.run("prune", "-f", "--idle", "1ms", "--filter", "name="+theirs); r.code != 0 || strings.Contains(r.stdout, "removed") ||
		!strings.Contains(r.stderr, "kept 1 sandboxes this user's sbx never used") {
		t.Errorf("prune --idle 1ms of another user's sandbox: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, n := range []string{busy, keep, theirs} {
		if len(c.containers(n)) != 1 {
			t.Errorf("prune removed %s", n)
		}
	}
	if r := c.run("prune", "-f", "--filter", filter); !strings.Contains(r.stderr, "kept "+busy+": a command is in flight (--busy removes it anyway)") {
		t.Errorf("prune text: %s", r.stderr)
	}

	r = c.run("prune", "-f", "--busy", "--filter", filter)
	if r.code != 0 || !strings.Contains(r.stdout, "removed "+busy) || len(c.containers(busy)) != 0 || len(c.containers(keep)) != 1 {
		t.Errorf("prune --busy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := other.run("rm", "-f", theirs); r.code != 0 {
		t.Errorf("rm: %s", r.stderr)
	}
}
