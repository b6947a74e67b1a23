package cmd

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// These run the real sbx binary against the real engine (see engine_test.go). What a sandbox
// leaves on the host (links in a rw workspace, modes of the files it hands out) must not
// steer sbx cp, and a copy must not create a sandbox the user only misnamed. The link and
// mode tests run as root and as a user who is not root, whom root's privileges would hide
// mistakes from.

// TestCLICpOutPlantedLinkRoot runs sbx as root; the project is root's, so the rw sandbox
// runs as uid 0 (--user 0:0, explicit as root must be).
func TestCLICpOutPlantedLinkRoot(t *testing.T) {
	testCpOutPlantedLink(t, newCLI(t), "root", "--user", "0:0")
}

// TestCLICpOutPlantedLinkNonRoot runs sbx as a user in the docker group; the rw sandbox runs
// as that user, the project's owner, so it can plant links the user could have made.
func TestCLICpOutPlantedLinkNonRoot(t *testing.T) {
	testCpOutPlantedLink(t, newCLIAs(t, nonRootUID), "user")
}

func testCpOutPlantedLink(t *testing.T, c *cli, who string, createFlags ...string) {
	name := cliRun + "-plant-" + who
	// A directory of the user's outside the project, which sbx may write to for them.
	outside := filepath.Join(c.Home, "outside")
	c.MkdirAll(outside)
	if r := c.Run(append([]string{"create", "-n", name, "--workspace", "rw"}, createFlags...)...); r.Code != 0 {
		t.Fatalf("create --workspace rw: exit %d\n%s", r.Code, r.Stderr)
	}
	// From inside: something to copy out, and links to the outside directory where the user
	// will copy to: ./out itself, and ./d/in below a real directory.
	r := c.Run("exec", "-n", name, "--", "sh", "-c",
		`mkdir -p /tmp/o/sub && echo pwned >/tmp/o/pwned && echo pwned >/tmp/o/sub/f && ln -s "$1" /workspace/out && mkdir /workspace/d && ln -s "$1" /workspace/d/in`,
		"sh", outside)
	if r.Code != 0 {
		t.Fatalf("planting the links: exit %d\n%s", r.Code, r.Stderr)
	}
	if target, err := os.Readlink(filepath.Join(c.Project, "out")); err != nil || target != outside {
		t.Fatalf("the sandbox's link on the host: %q, %v", target, err)
	}
	for _, tc := range []struct{ src, dst, link string }{
		{src: "/tmp/o/.", dst: "./out", link: "out"},
		{src: "/tmp/o/.", dst: "./out/", link: "out"},
		{src: "/tmp/o", dst: "out", link: "out"},
		{src: "/tmp/o/pwned", dst: "./out/x", link: "out"},
		{src: "/tmp/o/.", dst: "./d/in", link: "d/in"},
		{src: "/tmp/o/pwned", dst: filepath.Join(c.Project, "d/in/x"), link: "d/in"},
	} {
		r := c.Run("cp", name+":"+tc.src, tc.dst)
		link := filepath.Join(c.Project, tc.link)
		if r.Code != 1 || !strings.Contains(r.Stderr, fmt.Sprintf("%q", link)) || !strings.Contains(r.Stderr, "a symbolic link") ||
			!strings.Contains(r.Stderr, "\nhint: if you made that link") {
			t.Errorf("sbx cp %s:%s %s: exit %d\n%s", name, tc.src, tc.dst, r.Code, r.Stderr)
		}
	}
	if ents, err := os.ReadDir(outside); err != nil || len(ents) != 0 {
		t.Errorf("the directory outside the project holds %v (%v)", ents, err)
	}

	// Copies into real directories of the project still work, and so does a link of the
	// user's own outside it.
	if r := c.Run("cp", name+":/tmp/o", "./got"); r.Code != 0 || c.read("got/sub/f") != "pwned\n" {
		t.Errorf("copy into the project: exit %d\n%s", r.Code, r.Stderr)
	}
	mine := filepath.Join(c.Home, "mine")
	c.MkdirAll(mine)
	if err := os.Symlink(mine, filepath.Join(c.Home, "link")); err != nil {
		t.Fatal(err)
	}
	c.Chown(filepath.Join(c.Home, "link"))
	if r := c.Run("cp", name+":/tmp/o/.", filepath.Join(c.Home, "link")); r.Code != 0 {
		t.Errorf("copy through the user's own link: exit %d\n%s", r.Code, r.Stderr)
	} else if data, err := os.ReadFile(filepath.Join(mine, "pwned")); err != nil || string(data) != "pwned\n" {
		t.Errorf("copied through the user's link: %q, %v", data, err)
	}

	// The other way: a copy in through the planted link would hand the sandbox what it points
	// to. The secret is outside the project; only the link leads there.
	c.MkdirAll(filepath.Join(outside, "keys"))
	secret := filepath.Join(outside, "keys", "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Chown(secret)
	for _, src := range []string{"./out/keys/secret", "./out/keys", "./out/", "./d/in/keys/secret"} {
		r := c.Run("cp", src, name+":/tmp/stolen")
		if r.Code != 1 || !strings.Contains(r.Stderr, "source ") || !strings.Contains(r.Stderr, "a symbolic link") {
			t.Errorf("sbx cp %s %s:/tmp/stolen: exit %d\n%s", src, name, r.Code, r.Stderr)
		}
	}
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", "ls -A /tmp/stolen 2>&1; true"); strings.Contains(r.Stdout, "secret") || strings.Contains(r.Stdout, "keys") {
		t.Errorf("the host secret reached the sandbox: %s", r.Stdout)
	}
}

// TestCLICpOutUmaskRoot and TestCLICpOutUmaskNonRoot: modes a sandbox chose (0666, 0777,
// setuid, setgid, sticky) land on the host as the user's umask makes them.
func TestCLICpOutUmaskRoot(t *testing.T) { testCpOutUmask(t, newCLI(t), "root") }

func TestCLICpOutUmaskNonRoot(t *testing.T) { testCpOutUmask(t, newCLIAs(t, nonRootUID), "user") }

func testCpOutUmask(t *testing.T, c *cli, who string) {
	name := cliRun + "-umask-" + who
	r := c.Run("exec", "-n", name, "--", "sh", "-c", `set -e
		mkdir -p /tmp/m/d /tmp/m/t
		for f in rw x suid sgid; do echo "$f" >/tmp/m/$f; done
		chmod 0666 /tmp/m/rw
		chmod 0777 /tmp/m /tmp/m/x /tmp/m/d
		chmod 4777 /tmp/m/suid
		chmod 2777 /tmp/m/sgid
		chmod 1777 /tmp/m/t
		stat -c '%a %n' /tmp/m/suid /tmp/m/sgid /tmp/m/t`)
	if r.Code != 0 || r.Stdout != "4777 /tmp/m/suid\n2777 /tmp/m/sgid\n1777 /tmp/m/t\n" {
		t.Fatalf("setup: exit %d, %q\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, tc := range []struct {
		umask     string
		file, dir fs.FileMode
	}{
		{umask: "022", file: 0o644, dir: 0o755},
		{umask: "002", file: 0o664, dir: 0o775},
	} {
		dst := filepath.Join(c.Home, "m"+tc.umask)
		if r := c.RunIn(c.cmdWithUmask(tc.umask, "cp", name+":/tmp/m", dst)); r.Code != 0 {
			t.Fatalf("cp under umask %s: exit %d\n%s", tc.umask, r.Code, r.Stderr)
		}
		for p, want := range map[string]fs.FileMode{"": fs.ModeDir | tc.dir, "rw": tc.file, "x": tc.dir, "suid": tc.dir,
			"sgid": tc.dir, "d": fs.ModeDir | tc.dir, "t": fs.ModeDir | tc.dir} {
			fi, err := os.Lstat(filepath.Join(dst, p))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != want {
				t.Errorf("umask %s: %s landed as %v, want %v", tc.umask, filepath.Join(dst, p), fi.Mode(), want)
			}
		}
	}
}

// cmdWithUmask runs sbx with args under umask, as a shell whose user set it would.
func (c *cli) cmdWithUmask(umask string, args ...string) *exec.Cmd {
	cmd := c.Cmd(args...)
	cmd.Path = "/bin/sh"
	cmd.Args = append([]string{"sh", "-c", `umask "$0" && exec "$@"`, umask, c.Bin}, args...)
	return cmd
}

// A copy that names a sandbox finds it or fails: a typo must not leave a new sandbox behind.
// The project's sandbox (:PATH) is still made on first use, as exec makes it.
func TestCLICpNamedSandboxMustExist(t *testing.T) {
	c := newCLI(t)
	c.Write("h", "host\n")
	name := "no-such-xyz-" + cliRun
	for _, args := range [][]string{{"cp", name + ":/etc/hostname", "./h2"}, {"cp", "./h", name + ":/tmp/"}} {
		r := c.Run(args...)
		if r.Code != 1 || !strings.Contains(r.Stderr, fmt.Sprintf("sandbox %q not found", name)) || !strings.Contains(r.Stderr, "\nhint: create it first") {
			t.Errorf("sbx %s: exit %d\n%s", strings.Join(args, " "), r.Code, r.Stderr)
		}
		if n := len(c.Containers(name)); n != 0 {
			t.Errorf("sbx %s left %d containers named %s", strings.Join(args, " "), n, name)
		}
	}
	if _, err := os.Lstat(filepath.Join(c.Project, "h2")); !os.IsNotExist(err) {
		t.Errorf("h2 was written: %v", err)
	}
	if r := c.Run("cp", "./h", ":/tmp/"); r.Code != 0 {
		t.Errorf("cp to the project's sandbox: exit %d\n%s", r.Code, r.Stderr)
	}
}
