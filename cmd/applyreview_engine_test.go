package cmd

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What sbx apply writes is the change set sbx diff showed, or nothing; a running sandbox sees
// the project as apply left it (and keeps its later writes); a sandbox in use is not stopped
// under its commands; a huge sparse file costs what it holds.

func TestCLIApplyWritesWhatWasReviewedRoot(t *testing.T) {
	testApplyReviewed(t, newCLI(t), "reviewed-root", "--user", "0:0")
}

func TestCLIApplyWritesWhatWasReviewedNonRoot(t *testing.T) {
	testApplyReviewed(t, newCLIAs(t, nonRootUID), "reviewed-user")
}

var digestLine = regexp.MustCompile(`change set (sha256:[0-9a-f]{64})`)

func testApplyReviewed(t *testing.T, c *cli, name string, createFlags ...string) {
	c.Write("notes.txt", "host\n")
	if r := c.Run(append([]string{"create", "-n", name, "--workspace", "overlay"}, createFlags...)...); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	inside := func(script string) {
		t.Helper()
		if r := c.Run("exec", "-n", name, "--", "sh", "-ec", "cd /workspace; "+script); r.Code != 0 {
			t.Fatalf("exec %q: %s", script, r)
		}
	}
	inside("echo benign > notes.txt")
	r := c.Run("diff", "-n", name)
	m := digestLine.FindStringSubmatch(r.Stderr)
	if r.Code != 0 || m == nil || !strings.Contains(r.Stdout, "+benign") {
		t.Fatalf("diff: want the change and its digest on stderr: %s", r)
	}
	reviewed := m[1]
	if r := c.Run("diff", "-n", name, "--digest"); r.Code != 0 || r.Stdout != reviewed+"\n" {
		t.Fatalf("diff --digest: want %s: %s", reviewed, r)
	}

	// What a process watching the file's atime would do once diff has read it.
	inside("echo swapped > notes.txt")
	r = c.Run("apply", "-n", name, "--expect", reviewed)
	if r.Code != 1 || !strings.Contains(r.Stderr, "not what you reviewed") {
		t.Fatalf("apply --expect after the swap: want exit 1, refused: %s", r)
	}
	if got := c.read("notes.txt"); got != "host\n" {
		t.Fatalf("a refused apply wrote notes.txt: %q", got)
	}

	// Reviewed again, it applies exactly that, and the running sandbox sees it and keeps
	// writing to the project as it now is (before, its next write went to the file apply took
	// out of the upper layer, and was lost).
	r = c.Run("diff", "-n", name, "--digest")
	if r.Code != 0 || r.Stdout == reviewed+"\n" {
		t.Fatalf("diff --digest after the swap: want another digest: %s", r)
	}
	r = c.Run("apply", "-n", name, "--expect", strings.TrimSpace(r.Stdout))
	if r.Code != 0 || !strings.Contains(r.Stderr, "starting it again") {
		t.Fatalf("apply --expect: want it applied, the sandbox restarted: %s", r)
	}
	if got := c.read("notes.txt"); got != "swapped\n" {
		t.Fatalf("notes.txt after apply: %q", got)
	}
	inside("echo more >> notes.txt")
	if r := c.Run("exec", "-n", name, "--", "cat", "/workspace/notes.txt"); r.Stdout != "swapped\nmore\n" {
		t.Fatalf("the sandbox sees %q after apply and a write: %s", r.Stdout, r)
	}
	if r := c.Run("diff", "-n", name, "--name-only"); r.Code != 0 || r.Stdout != "notes.txt\n" {
		t.Fatalf("the sandbox's write after apply was lost: diff --name-only says %q: %s", r.Stdout, r)
	}

	// In use: refused unless --restart, nothing written, the background process kept.
	if r := c.Run("exec", "-n", name, "-d", "--", "sleep", "600"); r.Code != 0 {
		t.Fatalf("exec -d: %s", r)
	}
	r = c.Run("apply", "-n", name)
	if r.Code != 125 || !strings.Contains(r.Stderr, "is in use") || !strings.Contains(r.Stderr, "--restart") {
		t.Fatalf("apply on a sandbox in use: want exit 125 naming the use and --restart: %s", r)
	}
	if got := c.read("notes.txt"); got != "swapped\n" {
		t.Fatalf("the refused apply wrote notes.txt: %q", got)
	}
	if got := c.sleepers(name); !strings.Contains(got, "sleep 600") {
		t.Fatalf("the refused apply ended the background process (running: %q)", got)
	}
	if r := c.Run("apply", "-n", name, "--restart"); r.Code != 0 || c.read("notes.txt") != "swapped\nmore\n" {
		t.Fatalf("apply --restart: %s", r)
	}

	// On a terminal, apply lists the change set and asks; no writes nothing.
	inside("echo asked > notes.txt")
	for _, answer := range []string{"n", "y"} {
		cmd := c.Cmd("apply", "-n", name)
		term := c.StartOnTerminal(cmd, 24, 200)
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(term.Output(), "[y/N]") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		out := term.Output()
		if !strings.Contains(out, "modified file notes.txt") || !digestLine.MatchString(out) {
			t.Fatalf("apply on a terminal: want the change set and its digest before the question: %q", out)
		}
		if _, err := term.WriteString(answer + "\n"); err != nil {
			t.Fatal(err)
		}
		out = term.Closed()
		err := cmd.Wait()
		var exit *exec.ExitError
		switch answer {
		case "n":
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || c.read("notes.txt") != "swapped\nmore\n" {
				t.Fatalf("answered n: want exit 1 and nothing written (%v): %q", err, out)
			}
		case "y":
			if err != nil || c.read("notes.txt") != "asked\n" {
				t.Fatalf("answered y: want it applied (%v): %q", err, out)
			}
		}
	}

	// A 64 GiB sparse file holding one byte: diff names it, apply writes one extent.
	inside("truncate -s 64G huge.img; printf x | dd of=huge.img bs=1 seek=1000000 conv=notrunc 2>/dev/null")
	r = c.Run("diff", "-n", name)
	if r.Code != 0 || !strings.Contains(r.Stdout, "Binary files a/huge.img and b/huge.img differ") || len(r.Stdout) > 4096 {
		t.Fatalf("diff of a 64 GiB sparse file: want it named, not streamed (%d bytes): %s", len(r.Stdout), r)
	}
	if r := c.Run("apply", "-n", name); r.Code != 0 {
		t.Fatalf("apply of the sparse file: %s", r)
	}
	fi, err := os.Stat(filepath.Join(c.Project, "huge.img"))
	if err != nil || fi.Size() != 64<<30 {
		t.Fatalf("huge.img on the host: %v %v", fi, err)
	}
	if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used > 1<<20 {
		t.Errorf("huge.img takes %d bytes of the host's disk; the sandbox's held one byte", used)
	}
}
