package cmd

import (
	"strings"
	"testing"
)

// A running overlay sandbox must see the project as it is after sbx discard, and a sandbox
// in use must not be stopped under its commands: the discard refuses unless --restart.

func TestCLIDiscardSeenInsideRoot(t *testing.T) {
	testDiscardSeenInside(t, newCLI(t), "discard-seen-root", "--user", "0:0")
}

func TestCLIDiscardSeenInsideNonRoot(t *testing.T) {
	testDiscardSeenInside(t, newCLIAs(t, nonRootUID), "discard-seen-user")
}

func testDiscardSeenInside(t *testing.T, c *cli, name string, createFlags ...string) {
	c.Write("notes.txt", "host\n")
	if r := c.Run(append([]string{"create", "-n", name, "--workspace", "overlay"}, createFlags...)...); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	if r := c.Run("exec", "-n", name, "--", "sh", "-ec", "echo sandbox > /workspace/notes.txt; echo new > /workspace/added.txt"); r.Code != 0 {
		t.Fatalf("changing the workspace: %s", r)
	}

	r := c.Run("discard", "-n", name)
	if r.Code != 0 {
		t.Fatalf("discard: %s", r)
	}
	if !strings.Contains(r.Stderr, "starting it again") {
		t.Errorf("discard of a running, idle sandbox should say it restarted it: %s", r)
	}
	r = c.Run("exec", "-n", name, "--", "sh", "-c", "cat /workspace/notes.txt; if test -e /workspace/added.txt; then echo added-still-there; fi")
	if r.Code != 0 || r.Stdout != "host\n" {
		t.Fatalf("after discard the sandbox sees %q (exit %d), want the project's %q: %s", r.Stdout, r.Code, "host\n", r)
	}

	// In use: a background process runs, so the discard refuses and nothing is dropped.
	if r := c.Run("exec", "-n", name, "--", "sh", "-ec", "echo again > /workspace/notes.txt"); r.Code != 0 {
		t.Fatalf("changing the workspace: %s", r)
	}
	if r := c.Run("exec", "-n", name, "-d", "--", "sleep", "600"); r.Code != 0 {
		t.Fatalf("exec -d: %s", r)
	}
	r = c.Run("discard", "-n", name)
	if r.Code != 125 || !strings.Contains(r.Stderr, "is in use") || !strings.Contains(r.Stderr, "--restart") {
		t.Fatalf("discard of a sandbox in use: want exit 125 naming the use and --restart: %s", r)
	}
	if r := c.Run("diff", "-n", name, "--name-only"); r.Code != 0 || r.Stdout != "notes.txt\n" {
		t.Fatalf("the refused discard dropped something: diff says %q: %s", r.Stdout, r)
	}
	if got := c.sleepers(name); !strings.Contains(got, "sleep 600") {
		t.Fatalf("the refused discard ended the background process (running: %q)", got)
	}

	r = c.Run("discard", "-n", name, "--restart")
	if r.Code != 0 {
		t.Fatalf("discard --restart: %s", r)
	}
	r = c.Run("exec", "-n", name, "--", "cat", "/workspace/notes.txt")
	if r.Code != 0 || r.Stdout != "host\n" {
		t.Fatalf("after discard --restart the sandbox sees %q: %s", r.Stdout, r)
	}
}
