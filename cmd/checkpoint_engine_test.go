package cmd

import (
	"maps"
	"strings"
	"testing"
)

// Checkpoints of an overlay sandbox, as root and as a user in the docker group: after a
// checkpoint, more files are changed and deleted; a rollback brings the workspace, seen
// from inside with every file hashed, back to what it was at the checkpoint, and sbx diff
// then shows the checkpoint's changes only.
func TestCLICheckpointRollbackRoot(t *testing.T) {
	testCheckpointRollback(t, newCLI(t), "--user", "0:0")
}

func TestCLICheckpointRollbackNonRoot(t *testing.T) {
	testCheckpointRollback(t, newCLIAs(t, nonRootUID))
}

// insideHashes lists every path under /workspace, seen from inside the sandbox, with its
// type, mode and content's digest (or link target).
const insideHashes = `cd /workspace && find . -mindepth 1 | LC_ALL=C sort | while IFS= read -r p; do
  if [ -L "$p" ]; then echo "$p link $(readlink "$p")"
  elif [ -d "$p" ]; then echo "$p dir $(stat -c %a "$p")"
  else echo "$p file $(stat -c %a "$p") $(sha256sum < "$p" | cut -c1-64)"; fi
done`

func lines(s string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		out[l] = true
	}
	return out
}

func testCheckpointRollback(t *testing.T, c *cli, createFlags ...string) {
	c.Write("keep.txt", "keep\n")
	c.Write("mod.txt", "one\n")
	c.Write("del.txt", "bye\n")
	c.Write("dir/a", "a\n")
	if r := c.Run(append([]string{"create", "--workspace", "overlay"}, createFlags...)...); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	if r := c.Run("exec", "--", "sh", "-ec", `cd /workspace
echo two >> mod.txt
rm del.txt
mkdir -p new/deep && echo n > new/deep/n.txt
echo secret > new/private && chmod 600 new/private && chmod 500 new/deep
ln -s keep.txt link`); r.Code != 0 {
		t.Fatalf("changing the workspace: %s", r)
	}
	at := c.Run("exec", "--", "sh", "-c", insideHashes)
	diffAt := c.Run("diff", "--name-only")
	if at.Code != 0 || diffAt.Code != 0 || !strings.Contains(at.Stdout, "./new/private file 600 ") || !strings.Contains(at.Stdout, "./new/deep dir 500") {
		t.Fatalf("hashes %s\ndiff %s", at, diffAt)
	}
	if r := c.Run("checkpoint", "one"); r.Code != 0 || !strings.Contains(r.Stdout, "checkpoint one") {
		t.Fatalf("checkpoint: %s", r)
	}
	if r := c.Run("checkpoint", "ls", "--json"); r.Code != 0 || !strings.Contains(r.Stdout, `"label": "one"`) {
		t.Fatalf("checkpoint ls: %s", r)
	}
	if r := c.Run("exec", "--", "sh", "-ec", `cd /workspace
echo three > mod.txt
rm -r keep.txt dir new/private
echo later > later.txt
chmod 700 new/deep && rm -r new/deep`); r.Code != 0 {
		t.Fatalf("changing the workspace after the checkpoint: %s", r)
	}
	if mid := c.Run("exec", "--", "sh", "-c", insideHashes); maps.Equal(lines(at.Stdout), lines(mid.Stdout)) {
		t.Fatalf("the changes after the checkpoint did not show: %s", mid)
	}
	if r := c.Run("rollback", "one"); r.Code != 0 || !strings.Contains(r.Stdout, "rolled back") {
		t.Fatalf("rollback: %s", r)
	}
	after := c.Run("exec", "--", "sh", "-c", insideHashes)
	if after.Code != 0 || !maps.Equal(lines(at.Stdout), lines(after.Stdout)) {
		t.Fatalf("the workspace after rollback differs from the checkpoint:\nat the checkpoint:\n%s\nafter:\n%s", at.Stdout, after.Stdout)
	}
	if r := c.Run("diff", "--name-only"); r.Code != 0 || r.Stdout != diffAt.Stdout {
		t.Fatalf("diff after rollback:\n%s\nat the checkpoint:\n%s", r, diffAt.Stdout)
	}
	if r := c.Run("rollback", "two"); r.Code != 125 || !strings.Contains(r.Stderr, `no checkpoint "two"`) {
		t.Fatalf("rollback to a missing checkpoint: %s", r)
	}
	if r := c.Run("rm", "-f"); r.Code != 0 {
		t.Fatalf("rm: %s", r)
	}
}
