package cmd

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These run the real sbx binary against the real engine (see engine_test.go).

func TestCLICpStreamsJSONAndExec(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "workspace: none\n")
	c.Write("in/a.txt", "alpha\n")
	c.Write("in/sub/b.txt", "beta\n")

	// - in: a tar stream from stdin, extracted into an existing directory.
	cmd := c.Cmd("cp", "-", ":/tmp")
	tarIn := exec.Command("tar", "-c", "-C", c.Project, "in")
	var err error
	if cmd.Stdin, err = tarIn.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := tarIn.Start(); err != nil {
		t.Fatal(err)
	}
	r := c.RunIn(cmd)
	_ = tarIn.Wait()
	if r.Code != 0 || !strings.Contains(r.Stderr, "copied 2 files") {
		t.Fatalf("cp - :/tmp: exit %d stderr %q", r.Code, r.Stderr)
	}

	// A file into the none workspace, with the JSON summary.
	r = c.Run("cp", "--json", "in/a.txt", ":note.txt")
	var s struct {
		Direction, Sandbox, Src, Dst string
		Files                        int
		Bytes                        int64
	}
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil || r.Code != 0 {
		t.Fatalf("cp --json: exit %d stdout %q stderr %q (%v)", r.Code, r.Stdout, r.Stderr, err)
	}
	if s.Direction != "in" || s.Src != filepath.Join(c.Project, "in", "a.txt") || s.Dst != "/workspace/note.txt" || s.Files != 1 || s.Bytes != 6 {
		t.Errorf("summary %+v", s)
	}

	r = c.Run("exec", "--", "sh", "-c", "cat /tmp/in/a.txt /tmp/in/sub/b.txt /workspace/note.txt")
	if r.Stdout != "alpha\nbeta\nalpha\n" {
		t.Errorf("a following exec sees %q %q", r.Stdout, r.Stderr)
	}

	// - out: the raw tar stream on stdout.
	cmd = c.Cmd("cp", ":/tmp/in", "-")
	var raw bytes.Buffer
	cmd.Stdout = &raw
	if r = c.RunIn(cmd); r.Code != 0 {
		t.Fatalf("cp :/tmp/in -: exit %d stderr %q", r.Code, r.Stderr)
	}
	list := exec.Command("tar", "-t")
	list.Stdin = &raw
	out, err := list.Output()
	if err != nil {
		t.Fatalf("tar -t: %v", err)
	}
	if got := strings.Fields(string(out)); strings.Join(got, " ") != "in/ in/a.txt in/sub/ in/sub/b.txt" && strings.Join(got, " ") != "in/ in/sub/ in/sub/b.txt in/a.txt" {
		t.Errorf("stream lists %v", got)
	}
}

func TestCLICpRefusals(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "workspace: ro\n")
	c.Write("f.txt", "x\n")
	r := c.Run("cp", "f.txt", ":/workspace/copy.txt")
	if r.Code != 1 || !strings.Contains(r.Stderr, "mounted read-only (workspace: ro, from project:"+filepath.Join(c.Project, ".sbx.yaml")+":1)") ||
		!strings.Contains(r.Stderr, "hint: copy into /tmp instead") {
		t.Errorf("ro workspace: exit %d stderr %q", r.Code, r.Stderr)
	}
	if r = c.Run("cp", "f.txt", ":/etc/"); r.Code != 1 || !strings.Contains(r.Stderr, "root file system is read-only (readOnlyRoot: true, from default)") {
		t.Errorf("read-only root: exit %d stderr %q", r.Code, r.Stderr)
	}

	if r = c.Run("exec", "--", "sh", "-c", "mkdir /tmp/t && echo ok >/tmp/t/a && ln -s /etc/passwd /tmp/t/passwd && ln -s / /tmp/t/root"); r.Code != 0 {
		t.Fatalf("setup: %s", r.Stderr)
	}
	outDir := t.TempDir()
	r = c.Run("cp", ":/tmp/t", filepath.Join(outDir, "t"))
	if r.Code != 1 || !strings.Contains(r.Stderr, "symlink refused") {
		t.Errorf("symlinks out: exit %d stderr %q", r.Code, r.Stderr)
	}
	if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
		t.Errorf("a refused copy wrote %v", ents)
	}
}

// stagingIn lists the staging directories in the sandbox directory dir.
func (c *cli) stagingIn(dir string) string {
	c.T.Helper()
	r := c.Run("exec", "--", "sh", "-c", "ls -A "+dir+" | grep '^.sbx-cp-' || true")
	return strings.TrimSpace(r.Stdout)
}

func TestCLICpKilledHalfwayIntoSandbox(t *testing.T) {
	c := newCLI(t)
	c.Write("dst/f", "old\n")
	if r := c.Run("cp", "dst", ":/tmp/"); r.Code != 0 {
		t.Fatalf("setup copy: %s", r.Stderr)
	}

	// Half a tar stream that replaces /tmp/dst/f, then SIGKILL.
	cmd := c.Cmd("cp", "-", ":/tmp/dst")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(stdin)
	_ = tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 64 << 20})
	if _, err := tw.Write(make([]byte, 16<<20)); err != nil {
		t.Fatalf("writing to sbx cp: %v (%s)", err, errb.String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.stagingIn("/tmp/dst") == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no staging directory appeared; stderr %q", errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	stdin.Close()
	// The sandbox side sees its stdin end without the final frame and removes its staging.
	deadline = time.Now().Add(10 * time.Second)
	for s := c.stagingIn("/tmp/dst"); s != ""; s = c.stagingIn("/tmp/dst") {
		if time.Now().After(deadline) {
			t.Errorf("staging still there 10 s after the kill: %s", s)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	if r := c.Run("exec", "--", "cat", "/tmp/dst/f"); r.Stdout != "old\n" {
		t.Errorf("after the kill the destination holds %q (%s)", r.Stdout, r.Stderr)
	}
	// The next copy into the directory succeeds and leaves no staging behind.
	c.Write("f2", "new\n")
	if r := c.Run("cp", "f2", ":/tmp/dst/f"); r.Code != 0 {
		t.Fatalf("next copy: %s", r.Stderr)
	}
	if s := c.stagingIn("/tmp/dst"); s != "" {
		t.Errorf("staging left after the next copy: %s", s)
	}
	if r := c.Run("exec", "--", "cat", "/tmp/dst/f"); r.Stdout != "new\n" {
		t.Errorf("next copy: %q", r.Stdout)
	}
}

func TestCLICpKilledHalfwayOutOfSandbox(t *testing.T) {
	c := newCLI(t)
	if r := c.Run("exec", "--", "sh", "-c", "head -c 200000000 /dev/urandom >/tmp/big"); r.Code != 0 {
		t.Fatalf("setup: %s", r.Stderr)
	}
	host := t.TempDir()
	dst := filepath.Join(host, "big")
	cmd := c.Cmd("cp", ":/tmp/big", dst)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once the host staging directory holds part of the file.
	deadline := time.Now().Add(30 * time.Second)
	for !partlyStaged(host) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no partial staging seen; stderr %q", errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if _, err := os.Lstat(dst); !os.IsNotExist(err) {
		t.Errorf("after the kill the destination exists: %v", err)
	}
	if !partlyStaged(host) {
		t.Error("the killed copy left no staging directory to clean up")
	}
	if r := c.Run("cp", ":/tmp/big", dst); r.Code != 0 {
		t.Fatalf("next copy: %s", r.Stderr)
	}
	ents, _ := os.ReadDir(host)
	if len(ents) != 1 || ents[0].Name() != "big" {
		t.Errorf("host directory after the next copy: %v", ents)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Size() != 200000000 {
		t.Errorf("copied file: %v %v", fi, err)
	}
}

// partlyStaged reports whether dir holds a staging directory with some, but not all, data.
func partlyStaged(dir string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/.sbx-cp-") {
			if fi, err := d.Info(); err == nil && fi.Size() > 0 && fi.Size() < 200000000 {
				found = true
				return io.EOF
			}
		}
		return nil
	})
	return found
}

func TestCLICpProgressOnATerminal(t *testing.T) {
	c := newCLI(t)
	// A slow sandbox, so that the copy outlasts the second before the bar appears.
	if r := c.Run("create", "--cpus", "0.1"); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 200<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := c.Cmd("cp", big, ":/tmp/big")
	term := c.StartOnTerminal(cmd, 24, 120)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cp on a terminal: %v\n%q", err, term.Output())
	}
	s := term.Closed()
	for _, want := range []string{"\r\x1b[K→ ", "200.0 MiB", "/1 files", "MiB/s", "copied 1 file (200.0 MiB) to "} {
		if !strings.Contains(s, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, s)
		}
	}
}
