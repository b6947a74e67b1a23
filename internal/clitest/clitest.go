// Package clitest runs the real sbx binary as a user would, for the test suites that drive
// it against an engine (cmd's engine tests and test/adversarial): a binary built once per
// test process, a HOME, config and state directories of its own, a fresh project, the run's
// label on every sandbox it creates, and the removal of those when the test ends.
package clitest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
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
	"github.com/docker/docker/api/types/volume"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Label returns a label unique to one test process: prefix and six random hex digits. What
// the process creates carries sbx.test=label, so a sweep can find leftovers.
func Label(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Binary is the static sbx binary the tests run (testenv.SbxBinary).
func Binary(t testing.TB) string {
	t.Helper()
	return testenv.SbxBinary(t)
}

// RemoveBinary removes what Binary built, if it built anything.
func RemoveBinary() { testenv.RemoveSbxBinary() }

// CLI is sbx for one test.
type CLI struct {
	T       *testing.T
	Eng     engine.Engine // the engine sbx talks to, for checks and cleanup
	Bin     string
	Home    string
	Project string
	Env     []string
	// Marker is SBX_HOST_MARKER's value: a host variable that must not show up inside.
	Marker string
	// Cred runs sbx as another user (NewAs); nil runs it as the test's own user.
	Cred *syscall.Credential
	// label is the run's, on every sandbox this CLI creates.
	label string
}

// Result is how one run of sbx ended.
type Result struct {
	Stdout, Stderr string
	Code           int
	Took           time.Duration
	MaxRSS         int64 // bytes, from the kernel's accounting of the sbx process
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d after %s\nstdout: %.2000q\nstderr: %.2000q", r.Code, r.Took.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// New gives t an sbx against eng, reached through dockerHost ("" keeps the caller's
// DOCKER_HOST), labelling what it creates with label. Everything it creates there is
// removed when t ends, however it ends.
func New(t *testing.T, label string, eng engine.Engine, dockerHost string) *CLI {
	t.Helper()
	// The project is not a sibling of $HOME, so a path above it is not judged as "contains
	// your home directory".
	c := &CLI{T: t, Eng: eng, Bin: Binary(t), Home: t.TempDir(), Project: filepath.Join(t.TempDir(), "project"), label: label}
	if err := os.Mkdir(c.Project, 0o755); err != nil {
		t.Fatal(err)
	}
	return c.setup(dockerHost)
}

// NewAs is New for user uid, who is not root but is in the docker group, as most people
// run sbx: root hides permission mistakes. Its home and project belong to that user, and
// files the test writes with Write are given to it. Only root can run such a test.
func NewAs(t *testing.T, label string, eng engine.Engine, uid int) *CLI {
	t.Helper()
	grp, err := user.LookupGroup("docker")
	if err != nil {
		t.Fatalf("the docker group (its members may use the engine's socket): %v", err)
	}
	gid, _ := strconv.Atoi(grp.Gid)
	return NewAsOn(t, label, eng, "", &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{uint32(gid)}})
}

// NewAsOn is New for the user cred names, against eng reached through dockerHost ("" keeps
// the caller's DOCKER_HOST): the docker group's member of NewAs, or the owner of a rootless
// engine. Only root can run such a test.
func NewAsOn(t *testing.T, label string, eng engine.Engine, dockerHost string, cred *syscall.Credential) *CLI {
	t.Helper()
	testenv.RequireRoot(t, fmt.Sprintf("running sbx as uid %d", cred.Uid))
	// t.TempDir's parents are private to root, so this user's directories live elsewhere.
	base, err := os.MkdirTemp("", "sbx-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	bin := filepath.Join(base, "sbx")
	if err := copyFile(Binary(t), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &CLI{T: t, Eng: eng, Bin: bin, Home: filepath.Join(base, "home"), Project: filepath.Join(base, "project"), label: label, Cred: cred}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{c.Home, c.Project} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	return c.setup(dockerHost)
}

func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode)
}

// setup gives c its environment and the cleanup of what it creates.
func (c *CLI) setup(dockerHost string) *CLI {
	// The sandbox user must reach the project, whatever the umask made of it.
	if err := os.Chmod(c.Project, 0o755); err != nil {
		c.T.Fatal(err)
	}
	c.Marker = "host-marker-" + c.label
	for _, kv := range os.Environ() {
		// The caller's own sbx settings (SBX_MEMORY, ...) must not shape the tests.
		if !strings.HasPrefix(kv, "SBX_") && !(dockerHost != "" && strings.HasPrefix(kv, "DOCKER_")) {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, "HOME="+c.Home, "XDG_CONFIG_HOME="+filepath.Join(c.Home, ".config"),
		"XDG_STATE_HOME="+filepath.Join(c.Home, ".state"), cmdutil.TestLabelEnv+"="+c.label, "NO_COLOR=1",
		"SBX_HOST_MARKER="+c.Marker)
	if dockerHost != "" {
		c.Env = append(c.Env, "DOCKER_HOST="+dockerHost)
	}
	c.T.Cleanup(c.removeAll)
	return c
}

// removeAll removes every sandbox and volume of this run made from c's project or a
// directory inside it (a test may run sbx from a subdirectory that is a project of its
// own): with sbx first, as a user would, and by force through the engine if that fails.
func (c *CLI) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Pooled sandboxes are no sandboxes rm can name; only a test that filled a pool has any.
	if _, err := os.Stat(filepath.Join(c.Home, ".state", "sbx", "pool")); err == nil {
		if r := c.Run("pool", "drain", "--all"); r.Code != 0 {
			c.T.Logf("cleanup: sbx pool drain --all: %s", r.Stderr)
		}
	}
	ours := filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+c.label))
	list, err := c.Eng.ContainerList(ctx, container.ListOptions{All: true, Filters: ours})
	if err != nil {
		c.T.Errorf("cleanup: listing containers: %v", err)
		return
	}
	for _, ctr := range list {
		// A sandbox's egress proxy goes with it (sbx rm).
		if !c.owns(ctr.Labels) || ctr.Labels[sandbox.LabelRole] != "" {
			continue
		}
		// A sandbox taken from the pool keeps the name it was made under in its label.
		name := ctr.Labels[sandbox.LabelName]
		if len(ctr.Names) > 0 {
			name = strings.TrimPrefix(ctr.Names[0], "/"+sandbox.ContainerName(""))
		}
		if r := c.Run("rm", "-f", name); r.Code != 0 {
			c.T.Logf("cleanup: sbx rm -f %s: %s", name, r.Stderr)
			if err := c.Eng.ContainerRemove(ctx, ctr.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
				c.T.Errorf("cleanup: %v", err)
			}
		}
	}
	vols, err := c.Eng.VolumeList(ctx, volume.ListOptions{Filters: ours})
	if err != nil {
		c.T.Errorf("cleanup: listing volumes: %v", err)
		return
	}
	for _, v := range vols.Volumes {
		if !c.owns(v.Labels) {
			continue
		}
		if err := c.Eng.VolumeRemove(ctx, v.Name, true); err != nil {
			c.T.Errorf("cleanup: %v", err)
		}
	}
}

// owns says whether an object with labels was made from c's project or a directory in it.
func (c *CLI) owns(labels map[string]string) bool {
	p := labels[sandbox.LabelProject]
	return p == c.Project || strings.HasPrefix(p, c.Project+string(filepath.Separator))
}

// In returns c for use in subtest t, so that its helpers fail t rather than the parent.
func (c *CLI) In(t *testing.T) *CLI {
	in := *c
	in.T = t
	in.Env = append([]string(nil), c.Env...)
	return &in
}

// Cmd is sbx with args, to run in the project, as c's user.
func (c *CLI) Cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(c.Bin, args...)
	cmd.Dir, cmd.Env = c.Project, c.Env
	if c.Cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.Cred}
	}
	return cmd
}

// Run runs sbx with args to its end.
func (c *CLI) Run(args ...string) Result { c.T.Helper(); return c.RunIn(c.Cmd(args...)) }

// RunIn runs cmd to its end, collecting stdout and stderr unless cmd already has them.
func (c *CLI) RunIn(cmd *exec.Cmd) Result {
	c.T.Helper()
	res, err := run(cmd)
	if err != nil {
		c.T.Fatalf("running sbx %v: %v", cmd.Args[1:], err)
	}
	return res
}

// Concurrently runs every command at once and returns their results in order. It may run
// outside the test's goroutine, so it reports a command that could not start in its result.
func Concurrently(cmds []*exec.Cmd) []Result {
	results := make([]Result, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if results[i], err = run(cmd); err != nil {
				results[i] = Result{Code: -1, Stderr: "sbx did not run: " + err.Error()}
			}
		}()
	}
	wg.Wait()
	return results
}

func run(cmd *exec.Cmd) (Result, error) {
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errb
	}
	start := time.Now()
	err := cmd.Run()
	res := Result{Stdout: out.String(), Stderr: errb.String(), Took: time.Since(start)}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			res.MaxRSS = ru.Maxrss << 10 // Linux reports KiB
		}
	}
	if ee, ok := err.(*exec.ExitError); ok {
		res.Code = ee.ExitCode()
	} else if err != nil {
		return res, err
	}
	return res, nil
}

// Terminal is a command started on a pseudo-terminal, and what it wrote there.
type Terminal struct {
	*os.File // the terminal's other side: what the test writes there, the command reads
	mu       sync.Mutex
	out      bytes.Buffer
	done     chan struct{}
}

// StartOnTerminal starts cmd with a terminal of rows by cols as its stdin, stdout and stderr.
func (c *CLI) StartOnTerminal(cmd *exec.Cmd, rows, cols uint16) *Terminal {
	c.T.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(func() { _ = ptmx.Close() })
	term := &Terminal{File: ptmx, done: make(chan struct{})}
	go func() {
		defer close(term.done)
		buf := make([]byte, 32<<10)
		for {
			n, err := ptmx.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			if err != nil {
				return // EIO once the command's end closed the terminal
			}
		}
	}()
	return term
}

// Output is what the command has written so far.
func (t *Terminal) Output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.String()
}

// Closed waits until the command's end has closed the terminal, and returns all it wrote.
func (t *Terminal) Closed() string {
	<-t.done
	return t.Output()
}

// Write creates a file in the project, and the directories on its way, owned by c's user.
func (c *CLI) Write(rel, content string) {
	c.T.Helper()
	p := filepath.Join(c.Project, rel)
	c.MkdirAll(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		c.T.Fatal(err)
	}
	c.Chown(p)
}

// MkdirAll makes dir and its missing parents, each owned by c's user.
func (c *CLI) MkdirAll(dir string) {
	c.T.Helper()
	if _, err := os.Stat(dir); err == nil {
		return
	}
	c.MkdirAll(filepath.Dir(dir))
	if err := os.Mkdir(dir, 0o755); err != nil {
		c.T.Fatal(err)
	}
	c.Chown(dir)
}

// Chown gives p (a file or directory the test made) to c's user.
func (c *CLI) Chown(p string) {
	c.T.Helper()
	if c.Cred == nil {
		return
	}
	if err := os.Lchown(p, int(c.Cred.Uid), int(c.Cred.Gid)); err != nil {
		c.T.Fatal(err)
	}
}

// Trust trusts the project's .sbx.yaml as it is now, as a user does after reviewing it.
func (c *CLI) Trust() {
	c.T.Helper()
	if r := c.Run("trust", "--yes"); r.Code != 0 {
		c.T.Fatalf("sbx trust --yes: %s", r)
	}
}

// Containers lists the containers of sandbox name, running or not.
func (c *CLI) Containers(name string) []container.Summary {
	c.T.Helper()
	list, err := c.Eng.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("name", "^/"+sandbox.ContainerName(name)+"$"))})
	if err != nil {
		c.T.Fatal(err)
	}
	return list
}

// Running lists the command lines in sandbox name that start with prefix.
func (c *CLI) Running(name, prefix string) []string {
	c.T.Helper()
	r := c.Run("exec", "-n", name, "--", "bash", "-c", `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' <$p/cmdline 2>/dev/null) && echo "$c"; done; exit 0`)
	if r.Code != 0 {
		c.T.Fatalf("listing processes: %s", r)
	}
	var out []string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// Snapshot records every path under root, root included, with its type, mode, size and
// content's digest or link target: two snapshots are equal when the tree is byte-identical.
func Snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + target
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			v += fmt.Sprintf(" %d %s", fi.Size(), hex.EncodeToString(sum[:]))
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
