package cmd

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// These tests check the agent's directory on the host ($XDG_STATE_HOME/sbx/agent/NAME) as
// each kind of user meets it: nothing inside the sandbox can store data there, whatever its
// uid, and rm removes it whatever an older sbx's sandbox left in it.

// agentDirWrites tries every way of storing something in the agent directory from inside,
// printing one line per attempt that succeeds or fails with another error than EROFS, then
// the sandbox user's uid and whether the command came through the agent.
const agentDirWrites = `d=/run/sbx-agent; cd "$d" || exit 9
try() { out=$("$@" 2>&1) && { echo "WROTE: $*"; return; }; case $out in *"Read-only file system"*) ;; *) echo "OTHER: $* -> $out";; esac; }
try touch x; try mkdir y; try mkdir -p y/z; try chmod 777 .; try chmod 0 agent.sock; try ln -s / l; try mkfifo f
try mv agent.sock z; try rm -f agent.sock; try dd if=/dev/zero of=big bs=1M count=10
try python3 -c 'import os; os.utime(".")'
echo "uid $(id -u) ppid $PPID"`

// agentDir is the host directory of sandbox name's agent.
func (c *cli) agentDir(name string) string {
	return filepath.Join(c.Home, ".state", "sbx", "agent", name)
}

// A sandbox can store nothing in its agent directory: not as uid 1000 under root or another
// user, not when it has the host user's uid (the host user is uid 1000 like the images'
// user, or a rw workspace runs as the project's owner), and not after a restart.
func TestCLIAgentDirReadOnly(t *testing.T) {
	for i, tt := range []struct {
		name    string
		cli     func(t *testing.T) *cli
		create  []string
		sameUID bool
	}{
		{"root", newCLI, nil, false},
		{"non-root", func(t *testing.T) *cli { return newCLIAs(t, nonRootUID) }, nil, false},
		{"uid 1000 like the sandbox user", func(t *testing.T) *cli { return newCLIAs(t, 1000) }, nil, true},
		{"rw workspace as its owner", func(t *testing.T) *cli { return newCLIAs(t, nonRootUID) }, []string{"--workspace", "rw"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cli(t)
			name := cliRun + "-ro" + strconv.Itoa(i)
			if r := c.Run(append([]string{"create", "-n", name}, tt.create...)...); r.Code != 0 {
				t.Fatalf("create: exit %d %s", r.Code, r.Stderr)
			}
			hostUID := os.Geteuid()
			if c.Cred != nil {
				hostUID = int(c.Cred.Uid)
			}
			for _, when := range []string{"first start", "after a restart"} {
				r := c.Run("exec", "-n", name, "--", "bash", "-c", agentDirWrites)
				lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
				last := lines[len(lines)-1]
				if r.Code != 0 || len(lines) != 1 || strings.HasSuffix(last, " ppid 0") {
					t.Errorf("%s: writing into the agent directory from inside (exit %d), through the agent:\n%s%s", when, r.Code, r.Stdout, r.Stderr)
				}
				if uid := strings.Fields(last + " x x")[1]; (uid == strconv.Itoa(hostUID)) != tt.sameUID {
					t.Errorf("%s: the sandbox user is uid %s, the host user %d", when, uid, hostUID)
				}
				dir := c.agentDir(name)
				entries, err := os.ReadDir(dir)
				if err != nil || len(entries) != 2 || entries[0].Name() != "agent.sock" || entries[1].Name() != "idle.lock" {
					t.Errorf("%s: the host's agent directory holds %v (%v), want agent.sock and idle.lock alone", when, entries, err)
				}
				if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 || fi.Sys().(*syscall.Stat_t).Uid != uint32(hostUID) {
					t.Errorf("%s: the agent directory: %v %v", when, fi, err)
				}
				if r := c.Run("stop", name); r.Code != 0 {
					t.Fatalf("stop: %s", r.Stderr)
				}
			}
		})
	}
}

// rm removes an agent directory whatever a sandbox of an older sbx, which could write there,
// left in it: directories of mode 0555 and 0000 with files, owned by the sandbox user (uid
// 1000 under root; the host user when they share a uid), and links, which it never follows.
func TestCLIRemoveLeftoverAgentDir(t *testing.T) {
	for _, tt := range []struct {
		name string
		cli  func(t *testing.T) *cli
	}{
		{"root", newCLI},
		{"non-root", func(t *testing.T) *cli { return newCLIAs(t, nonRootUID) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cli(t)
			name := cliRun + "-left"
			if r := c.Run("create", "-n", name); r.Code != 0 {
				t.Fatalf("create: %s", r.Stderr)
			}
			if r := c.Run("stop", name); r.Code != 0 {
				t.Fatalf("stop: %s", r.Stderr)
			}
			owner := 1000
			if c.Cred != nil {
				owner = int(c.Cred.Uid)
			}
			outside := filepath.Join(c.Home, "outside")
			if err := os.MkdirAll(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			keep := filepath.Join(outside, "keep")
			if err := os.WriteFile(keep, []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
			dir := c.agentDir(name)
			plantLeftovers(t, dir, outside, owner)
			if r := c.Run("rm", name); r.Code != 0 {
				t.Fatalf("rm: exit %d %s", r.Code, r.Stderr)
			}
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("the agent directory is left: %v", err)
			}
			if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 0 {
				t.Errorf("left beside it: %v", entries)
			}
			if data, err := os.ReadFile(keep); err != nil || string(data) != "keep me" {
				t.Errorf("a file a planted link pointed at: %q %v", data, err)
			}
		})
	}
}

// plantLeftovers fills dir as a sandbox of an older sbx could have, owned by uid.
func plantLeftovers(t *testing.T, dir, outside string, uid int) {
	t.Helper()
	for _, d := range []string{"sealed/deeper", "closed/inner", "open"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "data"), make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"out": outside, "sealed/keep": filepath.Join(outside, "keep")} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil && p != dir {
			err = os.Lchown(p, uid, uid)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for d, mode := range map[string]os.FileMode{"sealed/deeper": 0o555, "sealed": 0o555, "closed/inner": 0, "closed": 0, ".": 0o555} {
		if err := os.Chmod(filepath.Join(dir, d), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// A sandbox started by something other than sbx (docker start) has an agent with no socket:
// sbx uses the engine's exec, and --debug says why. The next start through sbx hands the
// agent its socket again.
func TestCLIDockerStartFallsBack(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-dstart"
	if r := c.Run("create", "-n", name); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	if r := c.Run("stop", name); r.Code != 0 {
		t.Fatalf("stop: %s", r.Stderr)
	}
	ctx := context.Background()
	if err := c.Eng.ContainerStart(ctx, sandbox.ContainerName(name), container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	r := c.Run("--debug", "exec", "-n", name, "--", "sh", "-c", "echo $PPID")
	if r.Code != 0 || r.Stdout != "0\n" {
		t.Errorf("exec after docker start: exit %d stdout %q stderr %s", r.Code, r.Stdout, r.Stderr)
	}
	if want := `sbx: command through the engine's exec: sandbox "` + name + `": its agent did not answer: `; !strings.Contains(r.Stderr, want) {
		t.Errorf("--debug does not say why: %s", r.Stderr)
	}
	logs, err := c.Eng.ContainerLogs(ctx, sandbox.ContainerName(name), container.LogsOptions{ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(logs)
	logs.Close()
	if !strings.Contains(string(out), "sbx-agent: no socket from sbx") {
		t.Errorf("the agent's log: %q", out)
	}
	r = c.Run("--debug", "exec", "-n", name, "-u", "root", "--", "id", "-u")
	if r.Stdout != "0\n" || !strings.Contains(r.Stderr, "sbx: command through the engine's exec: -u root: ") {
		t.Errorf("-u root: stdout %q stderr %s", r.Stdout, r.Stderr)
	}
	if r := c.Run("stop", name); r.Code != 0 {
		t.Fatalf("stop: %s", r.Stderr)
	}
	r = c.Run("--debug", "exec", "-n", name, "--", "sh", "-c", "echo $PPID")
	if r.Code != 0 || r.Stdout == "0\n" || strings.Contains(r.Stderr, "engine's exec") {
		t.Errorf("exec after a start by sbx: exit %d stdout %q stderr %s", r.Code, r.Stdout, r.Stderr)
	}
}
