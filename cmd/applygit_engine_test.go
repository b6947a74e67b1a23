package cmd

import (
	_ "embed"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gitPlant plants, inside an overlay sandbox, every way the test knows to make git on the host
// run a command after sbx apply: commondir, gitdir pointer files, submodules, worktrees,
// includes, core.hooksPath, attribute filters, nested and bare repositories.
//
//go:embed testdata/gitplant.sh
var gitPlant string

func TestCLIApplyNeverArmsGitRoot(t *testing.T) {
	testApplyNeverArmsGit(t, newCLI(t), "applygit-root", "--user", "0:0")
}

func TestCLIApplyNeverArmsGitNonRoot(t *testing.T) {
	testApplyNeverArmsGit(t, newCLIAs(t, nonRootUID), "applygit-user")
}

func testApplyNeverArmsGit(t *testing.T, c *cli, name string, createFlags ...string) {
	c.Write("README", "readme\n")
	c.Write("src/app.py", "print('app')\n")
	c.Write("gitcfg/extra", "[user]\n\tname = Included\n")
	c.Write("tools/hooks/README", "the hooks of this project\n")
	c.Write(".gitignore", "nested/\nwt/\n")
	c.Write("plain/file", "plain\n")
	c.git("", "init", "-q")
	c.git("", "config", "core.hooksPath", "tools/hooks")
	c.git("", "config", "include.path", "../gitcfg/extra")
	c.Write("nested/n.txt", "nested\n")
	c.git("nested", "init", "-q")
	c.git("nested", "add", ".")
	c.git("nested", "commit", "-qm", "nested")
	c.git("", "-c", "protocol.file.allow=always", "submodule", "add", "-q", filepath.Join(c.Project, "nested"), "vendor/lib")
	c.git("", "add", ".")
	c.git("", "commit", "-qm", "init")
	c.git("", "worktree", "add", "-q", "wt")
	gitmodules := c.read(".gitmodules")
	extra := c.read("gitcfg/extra")
	moduleConfig := c.read(".git/modules/vendor/lib/config")
	mark := filepath.Join(c.Home, "planted-ran")

	if r := c.Run(append([]string{"create", "-n", name, "--workspace", "overlay"}, createFlags...)...); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	if r := c.Run("exec", "-n", name, "--", "bash", "-c", gitPlant, "gitplant", mark); r.Code != 0 {
		t.Fatalf("planting inside the sandbox: %s", r)
	}

	// The diff shows every planted path, marks each protected, and names the links' targets.
	r := c.Run("diff", "-n", name, "--json")
	if r.Code != 0 {
		t.Fatalf("diff --json: %s", r)
	}
	var changes []struct{ Path, Status, Kind, Protected, Target string }
	if err := json.Unmarshal([]byte(r.Stdout), &changes); err != nil {
		t.Fatalf("diff --json: %v: %s", err, r)
	}
	unprotected := map[string]bool{}
	for _, ch := range changes {
		if ch.Protected == "" {
			unprotected[ch.Path] = true
		}
		if ch.Path == "leak-abs" && ch.Target != "/etc/passwd" {
			t.Errorf("diff --json: leak-abs should name its target /etc/passwd: %+v", ch)
		}
	}
	for _, p := range []string{"src/app.py", "inside-link", "emptydir", "README"} {
		if !unprotected[p] {
			t.Errorf("diff --json: %s should be an unprotected change: %s", p, r.Stdout)
		}
		delete(unprotected, p)
	}
	if len(unprotected) > 0 {
		t.Errorf("diff --json: these planted paths are not protected: %v", unprotected)
	}
	r = c.Run("diff", "-n", name)
	for _, want := range []string{"protected: .git/commondir", "protected: leak-abs", "-> /etc/passwd, outside the project", "protected: .gitattributes", "directory added: emptydir (mode 0755)", "mode changed: README 0644 -> 0600"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("diff: stderr should say %q: %s", want, r)
		}
	}

	r = c.Run("apply", "-n", name)
	if r.Code != 0 || !strings.Contains(r.Stderr, "skipped .git/commondir: protected") || !strings.Contains(r.Stderr, "skipped tools/hooks/pre-commit") || !strings.Contains(r.Stdout, "applied modified src/app.py") {
		t.Errorf("apply: want the change applied and the planted paths skipped: %s", r)
	}
	if got := c.read("src/app.py"); got != "print(\"changed in the sandbox\")\n" {
		t.Errorf("src/app.py on the host: %q", got)
	}
	if target, err := os.Readlink(filepath.Join(c.Project, "inside-link")); err != nil || target != "src/app.py" {
		t.Errorf("inside-link should be applied: %q %v", target, err)
	}
	if fi, err := os.Stat(filepath.Join(c.Project, "emptydir")); err != nil || !fi.IsDir() {
		t.Errorf("emptydir should be applied: %v", err)
	}
	for _, p := range []string{".git/commondir", ".git/x", "tools/hooks/pre-commit", ".gitattributes", ".git/worktrees/wt/y",
		".git/worktrees/wt/config.worktree", "nested/.git/commondir", "plain/.git", "plain/evil", "bare", ".GIT", ".git.", "leak-abs", "leak-up"} {
		if _, err := os.Lstat(filepath.Join(c.Project, p)); err == nil {
			t.Errorf("apply wrote %s on the host", p)
		}
	}
	for p, want := range map[string]string{".gitmodules": gitmodules, "gitcfg/extra": extra, ".git/modules/vendor/lib/config": moduleConfig} {
		if got := c.read(p); got != want {
			t.Errorf("apply changed %s on the host:\n%s", p, got)
		}
	}

	// What the user does next on the host runs nothing the sandbox wrote.
	for _, g := range []struct {
		dir  string
		args []string
	}{
		{"", []string{"status"}}, {"", []string{"diff"}}, {"", []string{"commit", "-qam", "host commit"}},
		{"wt", []string{"status"}}, {"vendor/lib", []string{"status"}}, {"nested", []string{"status"}},
		{"plain", []string{"status"}}, {"", []string{"submodule", "status"}},
	} {
		if out, err := c.gitRun(g.dir, g.args...); err != nil {
			t.Errorf("git %v in %q after apply: %v\n%s", g.args, g.dir, err, out)
		}
	}
	if data, err := os.ReadFile(mark); err == nil {
		t.Fatalf("git on the host ran commands the sandbox planted: %q", data)
	}

	// Named by the user, a link leaving the project is applied.
	if r := c.Run("apply", "-n", name, "--include-protected", "leak-abs"); r.Code != 0 {
		t.Fatalf("apply --include-protected leak-abs: %s", r)
	}
	if target, err := os.Readlink(filepath.Join(c.Project, "leak-abs")); err != nil || target != "/etc/passwd" {
		t.Errorf("apply --include-protected leak-abs: %q %v", target, err)
	}
}
