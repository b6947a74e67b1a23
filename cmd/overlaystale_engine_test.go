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

// A rw or overlay sandbox on a project only root owns runs as 1000:1000 and cannot write
// there: create says so, with the fix, and the sandbox indeed cannot write.
func TestCLIRootOwnedProjectWarnsAtCreate(t *testing.T) {
	c := newCLI(t) // root, so the project is root's
	c.Write("existing.txt", "root's\n")
	for _, ws := range []string{"rw", "overlay"} {
		name := "rootowned-" + ws
		r := c.Run("create", "-n", name, "--workspace", ws)
		if r.Code != 0 || !strings.Contains(r.Stderr, "warning: ") || !strings.Contains(r.Stderr, "cannot write where only root can") ||
			!strings.Contains(r.Stderr, "hint: chown the project") {
			t.Errorf("create --workspace %s on a root-owned project: want a warning with the fix: %s", ws, r)
		}
		r = c.Run("exec", "-n", name, "--", "sh", "-c", "id -u; echo x >> /workspace/existing.txt")
		if r.Code == 0 || !strings.HasPrefix(r.Stdout, "1000\n") || !strings.Contains(r.Stderr, "Permission denied") {
			t.Errorf("--workspace %s: the sandbox should run as 1000 and be refused the write the warning named: %s", ws, r)
		}
		// The user's own words pick the user: no warning.
		if r := c.Run("create", "-n", name+"-root", "--workspace", ws, "--user", "0:0"); r.Code != 0 || strings.Contains(r.Stderr, "warning:") {
			t.Errorf("create --workspace %s --user 0:0: want no warning: %s", ws, r)
		}
	}
}
