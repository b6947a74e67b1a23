package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// otherUID owns the file another local user plants in a shared directory.
const otherUID = 4343

// A .sbx.yaml another user planted in a shared (1777) directory configures nothing below it:
// discovery skips it with a warning naming its owner, and a project of the user's own below
// it keeps working, with its own file.
func TestCLIDiscoverySkipsPlantedFile(t *testing.T) {
	for _, as := range []struct {
		name string
		cli  func(t *testing.T) *cli
	}{{"root", newCLI}, {"non-root", func(t *testing.T) *cli { return newCLIAs(t, nonRootUID) }}} {
		t.Run(as.name, func(t *testing.T) {
			c := as.cli(t)
			shared := filepath.Join(c.Project, "shared")
			if err := os.Mkdir(shared, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(shared, 0o1777); err != nil {
				t.Fatal(err)
			}
			planted := filepath.Join(shared, ".sbx.yaml")
			// Were it read, it would stop every command: exec is a denied tool.
			if err := os.WriteFile(planted, []byte("tools:\n  deny: [exec]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(planted, otherUID, otherUID); err != nil {
				t.Fatal(err)
			}
			mine := filepath.Join(shared, "me", "proj")
			c.MkdirAll(mine)
			c.Write("shared/me/proj/.sbx.yaml", "memory: 512m\n")
			warning := "warning: ignoring " + planted + ": it is owned by uid 4343; a file another user controls never configures your sandboxes"

			cmd := c.Cmd("exec", "--", "sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")
			cmd.Dir = mine
			r := c.RunIn(cmd)
			// Discovery stops at the user's own file before it reaches the planted one.
			if r.Code != 0 || r.Stdout != "536870912\n" || strings.Contains(r.Stderr, "warning") {
				t.Errorf("exec in my own nested project: exit %d, stdout %q, stderr %s", r.Code, r.Stdout, r.Stderr)
			}
			// A directory below the planted file without a project file of its own: the planted
			// file would be the nearest.
			other := filepath.Join(shared, "me", "scratch")
			c.MkdirAll(other)
			cmd = c.Cmd("explain", "--json")
			cmd.Dir = other
			if r := c.RunIn(cmd); r.Code != 0 || !strings.Contains(r.Stdout, `"projectRoot": "`+other+`"`) ||
				!strings.Contains(r.Stdout, `"reason": "it is owned by uid 4343"`) || !strings.Contains(r.Stderr, warning) {
				t.Errorf("explain below the planted file: exit %d, stdout %.600s, stderr %s", r.Code, r.Stdout, r.Stderr)
			}
			cmd = c.Cmd("exec", "--", "echo", "ran")
			cmd.Dir = other
			if r := c.RunIn(cmd); r.Code != 0 || r.Stdout != "ran\n" || !strings.Contains(r.Stderr, warning) {
				t.Errorf("exec below the planted file: exit %d, stdout %q, stderr %s", r.Code, r.Stdout, r.Stderr)
			}
			for _, dir := range []string{mine, other} {
				cmd = c.Cmd("rm", "-f")
				cmd.Dir = dir
				if r := c.RunIn(cmd); r.Code != 0 {
					t.Errorf("rm: %s", r.Stderr)
				}
			}
		})
	}
}
