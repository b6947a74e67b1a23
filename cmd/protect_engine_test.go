package cmd

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// These tests create rw sandboxes with the --workspace rw flag (the user's own words; a
// project file is never relied on to loosen anything) and attack the protected paths from
// inside, as root without capabilities and as a user who is not root.

// TestCLIProtectedPathsRoot runs sbx as root. The project is root's, so the sandbox runs as
// uid 0 (--user 0:0, explicit as root must be): uid 0 without capabilities gets no further.
func TestCLIProtectedPathsRoot(t *testing.T) {
	testProtectedPaths(t, newCLI(t), "--user", "0:0")
}

// TestCLIProtectedPathsNonRoot runs sbx as a user in the docker group; the sandbox runs as
// the project's owner, that user.
func TestCLIProtectedPathsNonRoot(t *testing.T) {
	testProtectedPaths(t, newCLIAs(t, nonRootUID))
}

// git runs git on the host in dir of the project, as the user sbx runs as.
func (c *cli) git(dir string, args ...string) string {
	c.T.Helper()
	out, err := c.gitRun(dir, args...)
	if err != nil {
		c.T.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return out
}

// gitRun is git but returns its failure: a repository a sandbox broke may make git fail, and
// a test goes on to look for what git ran. No config of the machine's or the user's counts.
func (c *cli) gitRun(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "safe.directory=*", "-c", "init.defaultBranch=main",
		"-c", "user.name=Host", "-c", "user.email=host@example.invalid"}, args...)...)
	cmd.Dir = filepath.Join(c.Project, dir)
	cmd.Env = append(os.Environ(), "HOME="+c.Home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_PAGER=", "PAGER=")
	if c.Cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.Cred}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// hostTree lists every path of the project with its type and owner.
func (c *cli) hostTree() []string {
	c.T.Helper()
	var out []string
	err := filepath.WalkDir(c.Project, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(c.Project, p)
		st := fi.Sys().(*syscall.Stat_t)
		out = append(out, fmt.Sprintf("%s %s %d:%d", filepath.ToSlash(rel), fi.Mode().Type(), st.Uid, st.Gid))
		return nil
	})
	if err != nil {
		c.T.Fatal(err)
	}
	return out
}

func (c *cli) read(name string) string {
	c.T.Helper()
	data, err := os.ReadFile(filepath.Join(c.Project, name))
	if err != nil {
		c.T.Fatal(err)
	}
	return string(data)
}

// attackScript tries each operation named on its command line inside the sandbox and prints
// "NAME: OK" or "NAME: ERRNO strerror" for each.
const attackScript = `
import errno, os, sys
def write(p, mode="w"):
    with open(p, mode) as f:
        f.write("planted by the sandbox\n")
def replace(p):
    write(p + ".new")
    try:
        os.rename(p + ".new", p)
    finally:
        if os.path.exists(p + ".new"):
            os.unlink(p + ".new")
ops = {
    "write": lambda p, q: write(p),
    "append": lambda p, q: write(p, "a"),
    "create": lambda p, q: write(p, "x"),
    "replace": lambda p, q: replace(p),
    "unlink": lambda p, q: os.unlink(p),
    "rename": lambda p, q: os.rename(p, q),
    "mkdir": lambda p, q: os.mkdir(p),
}
os.chdir("/workspace")
for spec in sys.argv[1:]:
    op, p, q = (spec.split(" ") + [""])[:3]
    try:
        ops[op](p, q)
        print(spec + ": OK")
    except OSError as e:
        print(spec + ": " + errno.errorcode[e.errno] + " " + e.strerror)
`

func testProtectedPaths(t *testing.T, c *cli, createFlags ...string) {
	c.Write(".sbx.yaml", "memory: 512m\n")
	c.Write("src/app.py", "print('app')\n")
	c.Write(".vscode/settings.json", "{}\n")
	c.Write("sub/inner/README", "nested\n")
	c.Write(".gitignore", "sub/\n")
	c.git("", "init", "-q")
	c.git("", "add", "-A")
	c.git("", "commit", "-q", "-m", "initial")
	c.git("sub/inner", "init", "-q")
	// A repository without hooks: sbx makes the empty directory so it can protect it.
	if err := os.RemoveAll(filepath.Join(c.Project, "sub/inner/.git/hooks")); err != nil {
		t.Fatal(err)
	}
	gitConfig := c.read(".git/config")
	before := c.hostTree()

	r := c.Run(append([]string{"create", "--workspace", "rw"}, createFlags...)...)
	if r.Code != 0 {
		t.Fatalf("create --workspace rw: exit %d\n%s", r.Code, r.Stderr)
	}
	// No mount point left a placeholder: the one change is the documented hooks directory,
	// owned like its .git directory.
	after := c.hostTree()
	owner := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	if c.Cred != nil {
		owner = fmt.Sprintf("%d:%d", c.Cred.Uid, c.Cred.Gid)
	}
	if want := append(slices.Clone(before), "sub/inner/.git/hooks d--------- "+owner); !slices.Equal(sorted(after), sorted(want)) {
		t.Errorf("the host tree changed beyond sub/inner/.git/hooks:\nbefore %q\nafter  %q", before, after)
	}

	ops := map[string]string{
		"write .sbx.yaml":                              "EROFS Read-only file system",
		"append .sbx.yaml":                             "EROFS Read-only file system",
		"replace .sbx.yaml":                            "EBUSY Device or resource busy",
		"unlink .sbx.yaml":                             "EBUSY Device or resource busy",
		"create .git/hooks/pre-commit":                 "EROFS Read-only file system",
		"write .git/hooks/pre-commit.sample":           "EROFS Read-only file system",
		"write .git/config":                            "EROFS Read-only file system",
		"replace .git/config":                          "EBUSY Device or resource busy",
		"rename .git .git-old":                         "EBUSY Device or resource busy",
		"rename .git/hooks .git/hooks-old":             "EBUSY Device or resource busy",
		"create .vscode/tasks.json":                    "EROFS Read-only file system",
		"write .vscode/settings.json":                  "EROFS Read-only file system",
		"rename .vscode .vscode-old":                   "EBUSY Device or resource busy",
		"create sub/inner/.git/hooks/pre-push":         "EROFS Read-only file system",
		"write sub/inner/.git/config":                  "EROFS Read-only file system",
		"rename sub/inner/.git sub/inner/old":          "EBUSY Device or resource busy",
		"rename sub/inner/.git/hooks sub/inner/.git/h": "EBUSY Device or resource busy",
		"rename sub/inner sub/moved":                   "EBUSY Device or resource busy",
		"rename sub sub-moved":                         "EBUSY Device or resource busy",
		// What is not protected stays writable.
		"write src/app.py":         "OK",
		"create src/new.txt":       "OK",
		"mkdir build":              "OK",
		"rename build build2":      "OK",
		"create sub/inner/notes":   "OK",
		"create .git/sandbox-note": "OK",
	}
	r = c.Run(append([]string{"exec", "--", "python3", "-c", attackScript}, slices.Sorted(maps.Keys(ops))...)...)
	if r.Code != 0 || strings.Contains(r.Stderr, "older configuration") {
		t.Fatalf("exec: exit %d\n%s", r.Code, r.Stderr)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		op, res, _ := strings.Cut(line, ": ")
		got[op] = res
	}
	for op, want := range ops {
		if got[op] != want {
			t.Errorf("%s: got %q, want %q", op, got[op], want)
		}
	}

	// On the host: nothing protected changed, the rest did.
	if s := c.read(".sbx.yaml"); s != "memory: 512m\n" {
		t.Errorf(".sbx.yaml on the host: %q", s)
	}
	if s := c.read(".git/config"); s != gitConfig {
		t.Errorf(".git/config on the host changed:\n%s", s)
	}
	for _, p := range []string{".git/hooks/pre-commit", ".vscode/tasks.json", "sub/inner/.git/hooks/pre-push", ".git-old", "sub-moved"} {
		if _, err := os.Lstat(filepath.Join(c.Project, p)); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
	if s := c.read("src/new.txt"); s != "planted by the sandbox\n" {
		t.Errorf("src/new.txt on the host: %q", s)
	}

	// git works inside: status, and a commit the host sees.
	r = c.Run("exec", "--", "sh", "-c", `cd /workspace && git status --porcelain && git add src && `+
		`git -c user.name=Sandbox -c user.email=sandbox@example.invalid commit -q -m "from the sandbox" && git -C sub/inner status --short`)
	if r.Code != 0 || r.Stdout != " M src/app.py\n?? src/new.txt\n?? README\n?? notes\n" {
		t.Fatalf("git in the sandbox: exit %d\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
	if log := c.git("", "log", "--format=%s %an", "-2"); log != "from the sandbox Sandbox\ninitial Host\n" {
		t.Errorf("git log on the host: %q", log)
	}
	if files := c.git("", "show", "--name-only", "--format=", "HEAD"); files != "src/app.py\nsrc/new.txt\n" {
		t.Errorf("files of the sandbox's commit: %q", files)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// TestCLIProtectedPathsRefuseLinks: a protected path that is a link is refused before any
// container exists, with the path and a hint.
func TestCLIProtectedPathsRefuseLinks(t *testing.T) {
	for _, who := range []string{"root", "non-root"} {
		t.Run(who, func(t *testing.T) {
			c := newCLI(t)
			if who == "non-root" {
				c = newCLIAs(t, nonRootUID)
			}
			c.Write("real-settings/settings.json", "{}\n")
			if err := os.Symlink("real-settings", filepath.Join(c.Project, ".vscode")); err != nil {
				t.Fatal(err)
			}
			c.Chown(filepath.Join(c.Project, ".vscode"))
			r := c.Run("create", "--workspace", "rw")
			if r.Code != 125 || !strings.Contains(r.Stderr, "protected paths: .vscode is a symbolic link") || !strings.Contains(r.Stderr, "hint: replace the link") {
				t.Errorf("create: exit %d\n%s", r.Code, r.Stderr)
			}
			if r := c.Run("ls", "--json", "--filter", "project="+c.Project); strings.TrimSpace(r.Stdout) != "[]" {
				t.Errorf("a sandbox exists after the refusal: %s", r.Stdout)
			}
		})
	}
}
