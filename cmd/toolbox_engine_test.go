package cmd

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// busyboxImage builds, through the Engine API, an image FROM scratch that holds the host's
// static busybox as /bin/busybox and nothing else: no shell, no applet links, no PATH. It is
// removed when the test ends.
func busyboxImage(t *testing.T) string {
	t.Helper()
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the host's static busybox (scripts/test-env.sh installs busybox-static): %v", err)
	}
	return buildTestImage(t, "sbx-test-busybox:"+strings.ToLower(strings.ReplaceAll(cliRun, "_", "-")),
		testFile{"Dockerfile", []byte("FROM scratch\nCOPY busybox /bin/busybox\n"), 0o644}, testFile{"busybox", bin, 0o755})
}

// testFile is one file of a test image's build context.
type testFile struct {
	name string
	data []byte
	mode int64
}

// buildTestImage builds tag from a context of files through the Engine API and removes it
// when the test ends.
func buildTestImage(t *testing.T, tag string, files ...testFile) string {
	t.Helper()
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	eng := enginetest.RealEngine(t)
	resp, err := eng.ImageBuild(context.Background(), &ctxTar, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, "building "+tag, resp.Body)
	t.Cleanup(func() { _, _ = eng.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true}) })
	return tag
}

// Every feature works in an image FROM scratch holding only a static busybox, and in bare
// debian:bookworm-slim, through sbx's agent (which sbx brings, as it brings the toolbox mounted
// at /run/sbx-tools: sbx's scripts run with its bash, and its applets follow the image's own
// PATH, so Debian keeps its GNU tools). The agent path is checked from inside (each command's
// process descends from the agent) and from outside (the engine ran no exec in the sandbox).
func TestCLIToolbox(t *testing.T) {
	busybox := busyboxImage(t)
	for _, tt := range []struct{ name, image string }{{"busybox", busybox}, {"debian-slim", baseImage}} {
		t.Run(tt.name, func(t *testing.T) { toolboxFeatures(t, tt.image) })
	}
}

func toolboxFeatures(t *testing.T, img string) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "image: "+img+"\n")
	c.Trust()
	name := cliRun + "-tb-" + randHex(t)
	if r := c.Run("create", "-n", name); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	info, err := c.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Config.Labels[sandbox.LabelToolbox]; got != images.ToolboxHash() {
		t.Errorf("label %s = %q, want %q", sandbox.LabelToolbox, got, images.ToolboxHash())
	}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		r := c.Run(args...)
		return r.Stdout, r.Stderr, r.Code
	}
	since := time.Now()
	// Sessions and background processes leave the agent's tree by design (they outlive the
	// exec that starts them), so for them, and for cp, only the engine's count tells. It must
	// see an exec when there is one: -u takes the engine's exec path.
	t.Cleanup(func() {
		if n := execsSince(t, info.ID, since); n != 0 {
			t.Errorf("the engine ran %d execs in the sandbox: some command did not go through the agent", n)
		}
		before := time.Now()
		if _, errOut, code := run("exec", "-n", name, "-u", "0:0", "--", "true"); code != 0 {
			t.Fatalf("exec -u 0:0: exit %d %q", code, errOut)
		}
		if n := execsSince(t, info.ID, before); n == 0 {
			t.Error("the engine's exec of exec -u was not counted: the count proves nothing")
		}
	})
	// fromAgent is a shell line that prints "agent" when its shell descends from the agent.
	const fromAgent = `p=$$; while [ "$p" -gt 1 ]; do case "$(tr '\0' ' ' </proc/$p/cmdline)" in "/run/sbx-agent-bin/sbx __agent "*) echo agent; exit 0;; esac; p=$(cut -d' ' -f4 /proc/$p/stat); done; echo engine`

	t.Run("exec", func(t *testing.T) {
		if out, errOut, code := run("exec", "-n", name, "--", "sh", "-c", "echo out; echo err >&2; exit 3"); code != 3 || out != "out\n" || errOut != "err\n" {
			t.Errorf("exit %d stdout %q stderr %q", code, out, errOut)
		}
		// The image's PATH (the engine's default: neither image sets one), then the toolbox's.
		if out, errOut, code := run("exec", "-n", name, "--", "sh", "-c", "echo $PATH"); code != 0 ||
			out != "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/sbx-tools/bin\n" {
			t.Errorf("PATH: exit %d stdout %q stderr %q", code, out, errOut)
		}
		if out, errOut, code := run("exec", "-n", name, "--", "sh", "-c", fromAgent); code != 0 || out != "agent\n" {
			t.Errorf("exec's path: exit %d stdout %q stderr %q", code, out, errOut)
		}
		if out, errOut, code := run("exec", "-n", name, "--", "no-such-cmd"); code != 127 || out != "" || errOut != "sbx: no-such-cmd: command not found\n" {
			t.Errorf("missing command: exit %d stdout %q stderr %q", code, out, errOut)
		}
	})
	t.Run("exec -i", func(t *testing.T) {
		cmd := c.Cmd("exec", "-i", "-n", name, "--", "wc", "-l")
		cmd.Stdin = strings.NewReader("a\nb\nc\n")
		if r := c.RunIn(cmd); r.Code != 0 || strings.TrimSpace(r.Stdout) != "3" || r.Stderr != "" {
			t.Errorf("%s", r)
		}
		cmd = c.Cmd("exec", "-i", "-n", name, "--", "sh")
		cmd.Stdin = strings.NewReader(fromAgent + "\n")
		if r := c.RunIn(cmd); r.Code != 0 || r.Stdout != "agent\n" {
			t.Errorf("exec -i's path: %s", r)
		}
	})
	t.Run("exec -t", func(t *testing.T) {
		// Without -i the command's stdin is not the terminal; its stdout is.
		cmd := c.Cmd("exec", "-t", "-n", name, "--", "sh", "-c", "tty <&1; "+fromAgent)
		term := c.StartOnTerminal(cmd, 40, 100)
		errc := make(chan error, 1)
		go func() { errc <- cmd.Wait() }()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("exec -t: %v\n%s", err, term.Output())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("exec -t hung:\n%s", term.Output())
		}
		if out := term.Closed(); !regexp.MustCompile(`^/dev/pts/[0-9]+\r\nagent\r\n$`).MatchString(out) {
			t.Errorf("exec -t tty: %q", out)
		}
	})
	t.Run("cp", func(t *testing.T) {
		host := t.TempDir()
		for p, s := range map[string]string{"f.txt": "file\n", "d/a.txt": "a\n", "d/sub/b.txt": "b\n"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(host, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(host, p), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, args := range [][]string{{filepath.Join(host, "f.txt"), name + ":/tmp/f.txt"}, {filepath.Join(host, "d"), name + ":/tmp/d"}} {
			if _, errOut, code := run(append([]string{"cp"}, args...)...); code != 0 {
				t.Fatalf("cp %v: exit %d %q", args, code, errOut)
			}
		}
		if out, errOut, code := run("exec", "-n", name, "--", "sh", "-c", "cat /tmp/f.txt; cd /tmp/d && find . -type f | sort && cat a.txt sub/b.txt"); code != 0 ||
			out != "file\n./a.txt\n./sub/b.txt\na\nb\n" {
			t.Errorf("copied in: exit %d stdout %q stderr %q", code, out, errOut)
		}
		back := t.TempDir()
		for _, args := range [][]string{{name + ":/tmp/f.txt", filepath.Join(back, "f.txt")}, {name + ":/tmp/d", filepath.Join(back, "d")}} {
			if _, errOut, code := run(append([]string{"cp"}, args...)...); code != 0 {
				t.Fatalf("cp %v: exit %d %q", args, code, errOut)
			}
		}
		for p, want := range map[string]string{"f.txt": "file\n", "d/a.txt": "a\n", "d/sub/b.txt": "b\n"} {
			if b, err := os.ReadFile(filepath.Join(back, p)); err != nil || string(b) != want {
				t.Errorf("copied out %s: %q %v", p, b, err)
			}
		}
	})
	t.Run("run", func(t *testing.T) {
		if out, errOut, code := run("run", "-n", name, "--lang", "sh", "-c", "echo $((6*7))"); code != 0 || out != "42\n" || errOut != "" {
			t.Errorf("run --lang sh: exit %d stdout %q stderr %q", code, out, errOut)
		}
		if out, errOut, code := run("run", "-n", name, "--lang", "sh", "-c", fromAgent); code != 0 || out != "agent\n" {
			t.Errorf("run's path: exit %d stdout %q stderr %q", code, out, errOut)
		}
	})
	t.Run("sh", func(t *testing.T) {
		if _, errOut, code := run("sh", "-n", name, "-c", "cd /tmp && export X=1"); code != 0 {
			t.Fatalf("first call: exit %d %q", code, errOut)
		}
		if out, errOut, code := run("sh", "-n", name, "-c", "pwd; echo $X; echo e >&2; return 3"); code != 3 || out != "/tmp\n1\n" || errOut != "e\n" {
			t.Errorf("second call: exit %d stdout %q stderr %q", code, out, errOut)
		}
		// The session's shell is the bash of sbx's scripts: the toolbox's, in Debian too.
		if out, errOut, code := run("sh", "-n", name, "-c", "readlink /proc/$$/exe"); code != 0 || out != "/run/sbx-tools/bash\n" {
			t.Errorf("the session's bash: exit %d stdout %q stderr %q", code, out, errOut)
		}
		if out, errOut, code := run("sh", "-n", name, "--list"); code != 0 || !strings.Contains(out, "default\tidle") {
			t.Errorf("--list: exit %d stdout %q stderr %q", code, out, errOut)
		}
	})
	t.Run("background", func(t *testing.T) {
		out, errOut, code := run("exec", "-n", name, "-d", "--", "sh", "-c", "echo hello; echo oops >&2; echo end")
		id := strings.TrimSpace(out)
		if code != 0 || id == "" {
			t.Fatalf("exec -d: exit %d %q %q", code, out, errOut)
		}
		if out, errOut, code := run("logs", "-n", name, "-f", id); code != 0 || out != "hello\nend\n" || errOut != "oops\nprocess "+id+" exited with code 0\n" {
			t.Errorf("logs -f: exit %d stdout %q stderr %q", code, out, errOut)
		}
		out, _, _ = run("exec", "-n", name, "-d", "--", "sleep", "300")
		id = strings.TrimSpace(out)
		if out, errOut, code := run("ps", "-n", name); code != 0 || !strings.Contains(out, id+"\tsleep 300\trunning") {
			t.Errorf("ps: exit %d stdout %q stderr %q", code, out, errOut)
		}
		if _, errOut, code := run("kill", "-n", name, id); code != 0 {
			t.Errorf("kill: exit %d %q", code, errOut)
		}
		if out, errOut, _ := run("ps", "-n", name); !strings.Contains(out, id+"\tsleep 300\texited (143)") {
			t.Errorf("ps after kill: stdout %q stderr %q", out, errOut)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		r := c.Run("exec", "-n", name, "--timeout", "2s", "--", "sh", "-c", "sleep 100 & sleep 100")
		if r.Code != 124 || r.Took > 10*time.Second || !strings.Contains(r.Stderr, "timed out after 2s") {
			t.Errorf("timeout: exit %d after %s, stderr %q", r.Code, r.Took, r.Stderr)
		}
		if out, errOut, code := run("exec", "-n", name, "--", "sh", "-c", "for p in /proc/[0-9]*; do case $(tr '\\0' ' ' <$p/cmdline 2>/dev/null) in 'sleep 100 ') echo left;; esac; done"); code != 0 || out != "" {
			t.Errorf("left running after the timeout: exit %d %q %q", code, out, errOut)
		}
	})
}

// execsSince counts the execs the engine created in container id since then.
func execsSince(t *testing.T, id string, since time.Time) int {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, errc := cli.Events(ctx, events.ListOptions{
		Since: strconv.FormatInt(since.Add(-time.Second).Unix(), 10), Until: strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10),
		Filters: filters.NewArgs(filters.Arg("container", id), filters.Arg("event", "exec_create")),
	})
	n := 0
	for {
		select {
		case <-msgs:
			n++
		case err := <-errc:
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("engine events: %v", err)
			}
			return n
		}
	}
}
