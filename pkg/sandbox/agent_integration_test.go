package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
	"github.com/sbx-sandbox/sbx/pkg/stats"
)

// The agent directory was writable from inside in sandboxes of older sbx versions. A link
// planted there in place of the socket must never make sbx connect to what it points at on
// the host; the command then goes through the engine's exec and still works. (Today's
// sandboxes cannot plant one: the directory is read-only inside.)
func TestAgentSocketLinkIsNotFollowed(t *testing.T) {
	e := sandboxtest.New(t, nil)
	res := e.Ensure()
	if res.Sandbox.Labels[sandbox.LabelAgent] == "" {
		t.Fatal("the sandbox has no agent")
	}
	dir := agentDir(e)
	// A host socket only a followed link could reach: inside the sandbox this path does not exist.
	bait := filepath.Join(t.TempDir(), "bait.sock")
	ln, err := net.Listen("unix", bait)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The first connection the bait takes says who came first: sbx, which would send nothing
	// and hang up after waiting for a greeting, or the test's own after the command, which
	// sends "S". Connections wait in the backlog in the order they came.
	first := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			first <- err.Error()
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // only fails a test that hangs
		b := make([]byte, 1)
		_, err = c.Read(b)
		first <- map[bool]string{true: "sentinel", false: "sbx"}[err == nil && b[0] == 'S']
	}()
	o := e.Sh("mv " + sandbox.AgentMountPath + "/agent.sock " + sandbox.AgentMountPath + "/moved.sock 2>&1; echo $?")
	if !strings.Contains(o.Stdout, "Read-only file system") {
		t.Errorf("moving the socket from inside: %q", o.Stdout)
	}
	// As a sandbox of an older sbx could.
	if err := os.Rename(filepath.Join(dir, "agent.sock"), filepath.Join(dir, "moved.sock")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bait, filepath.Join(dir, "agent.sock")); err != nil {
		t.Fatal(err)
	}
	o = e.Sh("echo $PPID; echo works")
	if !strings.HasSuffix(o.Stdout, "works\n") || !strings.HasPrefix(o.Stdout, "0\n") {
		t.Errorf("want the command through the engine's exec (parent pid 0): %+v %q %q", o.Res, o.Stdout, o.Stderr)
	}
	sentinel, err := net.Dial("unix", bait)
	if err != nil {
		t.Fatal(err)
	}
	defer sentinel.Close()
	if _, err := sentinel.Write([]byte("S")); err != nil {
		t.Fatal(err)
	}
	if who := <-first; who != "sentinel" {
		t.Fatalf("the bait socket was reached first by %s: sbx followed the planted link to a host socket", who)
	}
}

// Killing the agent from inside stops the sandbox; the next command starts it again, with
// its agent.
func TestAgentKilledFromInside(t *testing.T) {
	e := sandboxtest.New(t, nil)
	res := e.Ensure()
	script := `for p in /proc/[0-9]*; do if tr '\0' ' ' <$p/cmdline 2>/dev/null | grep -q '^` + sandbox.AgentBinaryPath + ` __agent '; then kill -KILL ${p#/proc/}; fi; done; sleep 5`
	_, err := e.M.Exec(context.Background(), res.Sandbox, sandbox.ExecOptions{Cmd: []string{"bash", "-c", script}, Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "stopped while the command ran") {
		t.Fatalf("want an error saying the sandbox stopped, got %v", err)
	}
	e.CheckTransport(true)
}

// A sandbox on an image sbx does not bundle has the agent too (sbx is static): a copy of the
// bundled image under another name, and bare Debian, which has no python and no tools of
// sbx's. The command's parent is the agent, sbx's binary mounted into the sandbox.
func TestAgentOnOtherImages(t *testing.T) {
	eng := enginetest.RealEngine(t)
	tag := "sbx-test-custom:" + sandboxtest.Run
	buildCustomImage(t, eng, tag)
	for _, img := range []string{tag, "debian:bookworm-slim"} {
		t.Run(img, func(t *testing.T) {
			e := sandboxtest.NewAgents(t, true, func(c *config.Config) { c.Image = img })
			res := e.Ensure()
			if res.Sandbox.Labels[sandbox.LabelAgent] == "" {
				t.Fatalf("no agent label on %s: %v", img, res.Sandbox.Labels)
			}
			e.CheckTransport(true)
			// Not bundled: the agent appends the toolbox to commands' PATH.
			want := sandbox.AgentBinaryPath + " __agent " + sandbox.AgentMountPath + " 0 " + sandbox.ToolboxMountPath + "/bin "
			if o := e.Sh(`tr '\0' ' ' </proc/$PPID/cmdline`); o.Stdout != want {
				t.Errorf("the command's parent is %q, not the agent", o.Stdout)
			}
		})
	}
}

// agentDir is where sbx keeps the agent socket of e's sandbox.
func agentDir(e *sandboxtest.Env) string { return filepath.Join(e.M.State.Dir, "agent", e.In.Name) }

// buildCustomImage makes tag, a copy of the bundled sandbox image under a name sbx does not
// know, and removes it when the test ends.
func buildCustomImage(t *testing.T, eng engine.Engine, tag string) {
	t.Helper()
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	df := []byte("FROM " + images.SandboxTag + "\nLABEL " + enginetest.TestLabel + "=" + sandboxtest.Run + "\n")
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df))}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(df)
	_ = tw.Close()
	resp, err := eng.ImageBuild(context.Background(), &ctxTar, build.ImageBuildOptions{Tags: []string{tag}, Remove: true})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Cleanup(func() {
		_, _ = eng.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true})
	})
	if _, err := eng.ImageInspect(context.Background(), tag); err != nil {
		t.Fatalf("building %s: %v\n%s", tag, err, out)
	}
}

// While a fork bomb holds every pid, a new command cannot start; the agent says so, and
// serves again once the bomb is gone.
func TestAgentDuringForkBomb(t *testing.T) {
	e := sandboxtest.New(t, func(c *config.Config) { c.PidsLimit = 64 })
	res := e.Ensure()
	// Time enough to see the bomb fill the limit, short of bash's own giving up on forks
	// (after about 20 s, exit status 254).
	bomb := make(chan sandboxtest.ExecOut, 1)
	go func() {
		bomb <- e.Exec(context.Background(), sandbox.ExecOptions{Cmd: []string{"bash", "-c", "bomb() { bomb | bomb & }; while true; do bomb; done"}, Timeout: 10 * time.Second})
	}()
	// Once the bomb holds (nearly) every pid, as the engine counts them.
	for deadline := time.Now().Add(time.Minute); ; {
		st, err := stats.Sample(context.Background(), e.M.Engine, res.Sandbox, true)
		if err == nil && st.PIDs >= 62 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bomb never filled the pids limit: %+v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var out strings.Builder
	r, err := e.M.Exec(context.Background(), res.Sandbox, sandbox.ExecOptions{Cmd: []string{"echo", "hi"}, Stdout: &out, Stderr: io.Discard})
	switch {
	case err != nil && !strings.Contains(err.Error(), "process limit reached"):
		t.Errorf("a command during the bomb: %v", err)
	case err == nil && (r.ExitCode != 0 || out.String() != "hi\n"):
		// The bomb may leave a pid free now and then; then the command must work.
		t.Errorf("a command during the bomb: %+v %q", r, out.String())
	}
	t.Logf("during the bomb: err %v", err)
	if o := <-bomb; !o.Res.TimedOut {
		t.Fatalf("the bomb did not time out: %+v", o.Res)
	}
	// init reaps the last of the bomb a moment after the kill; the deadline only fails an
	// agent that never serves again.
	for deadline := time.Now().Add(time.Minute); ; {
		if after := e.Sh("echo alive"); after.Stdout == "alive\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent does not serve after the bomb")
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// The agent directory is mounted read-only: whatever its uid (root included, which has the
// host directory's owner's uid when sbx runs as root, as a rw workspace's user or uid 1000
// may), the sandbox can create, write, chmod, link or remove nothing there. After a
// restart, which makes the sockets again, the host directory holds the socket and the idle
// lock alone.
func TestAgentDirReadOnlyFromInside(t *testing.T) {
	for _, user := range []string{"", "0:0"} {
		t.Run("user "+user, func(t *testing.T) {
			e := sandboxtest.New(t, func(c *config.Config) {
				if user != "" {
					c.User = user
				}
			})
			e.Ensure()
			checkAgentDirReadOnly(t, e)
			if err := e.M.Stop(context.Background(), e.In.Name); err != nil {
				t.Fatal(err)
			}
			e.CheckTransport(true)
			checkAgentDirReadOnly(t, e)
		})
	}
}

// agentDirWrites tries every way of storing something in the agent directory from inside,
// printing one line per attempt that succeeds or fails with another error than EROFS.
const agentDirWrites = `d=/run/sbx-agent; cd "$d" || exit 9
try() { out=$("$@" 2>&1) && { echo "WROTE: $*"; return; }; case $out in *"Read-only file system"*) ;; *) echo "OTHER: $* -> $out";; esac; }
try touch x; try mkdir y; try chmod 777 .; try chmod 777 agent.sock; try ln -s / l; try mkfifo f
try mv agent.sock z; try rm -f agent.sock; try mkdir -p y/z
try dd if=/dev/zero of=big bs=1M count=10; try python3 -c 'import os; os.utime(".")'
echo "done"`

func checkAgentDirReadOnly(t *testing.T, e *sandboxtest.Env) {
	t.Helper()
	o := e.Sh(agentDirWrites)
	if o.Stdout != "done\n" {
		t.Errorf("writing into the agent directory from inside:\n%s%s", o.Stdout, o.Stderr)
	}
	entries, err := os.ReadDir(agentDir(e))
	if err != nil || len(entries) != 2 || entries[0].Name() != "agent.sock" || entries[1].Name() != "idle.lock" {
		t.Errorf("the host's agent directory holds %v (%v), want agent.sock and idle.lock alone", entries, err)
	}
}
