//go:build linux

package overlay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/protect"
)

// These tests write the upper layer as overlayfs mounted with userxattr does (whiteouts are
// character devices 0/0, opaque directories carry user.overlay.opaque=y) and check what
// diff, apply and discard make of it. Making a whiteout needs CAP_MKNOD, so they need root.

// newLayers returns the layers of a project made of files (path: content; a trailing / makes
// a directory), prepared as a sandbox create does.
func newLayers(t *testing.T, files map[string]string) Layers {
	t.Helper()
	testenv.RequireRoot(t, "making overlay whiteouts (mknod)")
	base := t.TempDir()
	l := Layers{Lower: filepath.Join(base, "project"), Dir: filepath.Join(base, "overlay")}
	for p, content := range files {
		put(t, l.Lower, p, content, 0o644)
	}
	if err := os.MkdirAll(l.Lower, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(l, os.Geteuid(), os.Getegid()); err != nil {
		t.Fatal(err)
	}
	return l
}

// put writes content at rel under root (a directory when rel ends in /).
func put(t *testing.T, root, rel, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(rel, "/") {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// whiteout marks rel deleted in the upper layer, as overlayfs does.
func whiteout(t *testing.T, l Layers, rel string) {
	t.Helper()
	p := filepath.Join(l.Upper(), rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
}

// opaque makes the upper directory rel hide the project's, as a userxattr mount marks it.
func opaque(t *testing.T, l Layers, rel string) {
	t.Helper()
	p := filepath.Join(l.Upper(), rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
}

// summary is one change as "status kind path[ <- old][ binary][ protected=E][ conflict][ MODE->MODE]".
func summary(cs []Change) []string {
	var out []string
	for _, c := range cs {
		s := c.Status + " " + c.Kind + " " + c.Path
		if c.OldPath != "" {
			s += " <- " + c.OldPath
		}
		if c.Binary {
			s += " binary"
		}
		if c.Protected != "" {
			s += " protected=" + c.Protected
		}
		if c.Conflict != "" {
			s += " conflict"
		}
		if c.Status == ModeOnly {
			s += " " + c.OldMode + "->" + c.NewMode
		}
		out = append(out, s)
	}
	return out
}

func checkChanges(t *testing.T, got []Change, want ...string) {
	t.Helper()
	if g := summary(got); !slices.Equal(g, want) {
		t.Fatalf("changes:\n  %s\nwant:\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
}

var protected = []string{".sbx.yaml", ".git/hooks", ".git/config"}

// sandboxWork writes into the upper layer what a sandbox's edits would leave there.
func sandboxWork(t *testing.T, l Layers) {
	up := l.Upper()
	put(t, up, "mod.txt", "one\nTWO\nthree\n", 0o644)
	whiteout(t, l, "del.txt")
	whiteout(t, l, "ren.txt")
	put(t, up, "moved.txt", "rename me, whole\n", 0o644)
	put(t, up, "mode.sh", "#!/bin/sh\n", 0o755)
	put(t, up, "bin.dat", "\x00\x01new", 0o644)
	put(t, up, "new.txt", "new\n", 0o644)
	if err := os.Symlink("keep.txt", filepath.Join(up, "link")); err != nil {
		t.Fatal(err)
	}
	opaque(t, l, "dir")
	put(t, up, "dir/c", "c\n", 0o644)
	whiteout(t, l, "gone")
	put(t, up, "conflict.txt", "sandbox\n", 0o644)
	put(t, up, ".git/hooks/pre-commit", "#!/bin/sh\ncurl evil\n", 0o755)
	put(t, up, "tree/a/b/deep.txt", "deep\n", 0o644)
}

var project = map[string]string{
	"keep.txt": "keep\n", "mod.txt": "one\ntwo\nthree\n", "del.txt": "bye\n",
	"ren.txt": "rename me, whole\n", "mode.sh": "#!/bin/sh\n", "bin.dat": "\x00\x01old",
	"dir/a": "a\n", "dir/b": "b\n", "gone/x": "x\n", "conflict.txt": "host v1\n", ".git/hooks/": "",
}

var wantChanges = []string{
	"added file .git/hooks/pre-commit protected=.git/hooks",
	"modified file bin.dat binary",
	"modified file conflict.txt conflict",
	"deleted file del.txt",
	"deleted file dir/a",
	"deleted file dir/b",
	"added file dir/c",
	"deleted dir gone",
	"deleted file gone/x",
	"added symlink link",
	"modified file mod.txt",
	"mode file mode.sh 0644->0755",
	"renamed file moved.txt <- ren.txt",
	"added file new.txt",
	"added dir tree",
	"added dir tree/a",
	"added dir tree/a/b",
	"added file tree/a/b/deep.txt",
}

func TestChangesWhiteoutsOpaqueRenamesModes(t *testing.T) {
	l := newLayers(t, project)
	sandboxWork(t, l)
	// The host edits conflict.txt after the sandbox was created.
	put(t, l.Lower, "conflict.txt", "host v2\n", 0o644)
	got, err := l.Changes(protected, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, got, wantChanges...)
	// The project is untouched by reading.
	if b, _ := os.ReadFile(filepath.Join(l.Lower, "mod.txt")); string(b) != project["mod.txt"] {
		t.Fatalf("project changed: %q", b)
	}
	// Paths select changes at or under them, old paths of renames included.
	sel, err := l.Changes(protected, []string{"dir", "ren.txt"})
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, sel, "deleted file dir/a", "deleted file dir/b", "added file dir/c", "renamed file moved.txt <- ren.txt")
}

// TestPatchGitApplies checks the patch with git itself: git apply --check on a copy of the
// project accepts it, and git apply turns the copy into what the sandbox sees.
func TestPatchGitApplies(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	l := newLayers(t, project)
	sandboxWork(t, l)
	changes, err := l.Changes(protected, nil)
	if err != nil {
		t.Fatal(err)
	}
	// git refuses any path in .git; sbx diff shows it, apply skips it as protected.
	changes = slices.DeleteFunc(changes, func(c Change) bool { return c.Protected != "" })
	var patch bytes.Buffer
	if err := l.Patch(&patch, changes); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rename from ren.txt\nrename to moved.txt\n", "old mode 100644\nnew mode 100755\n", "GIT binary patch\nliteral ", "new file mode 120000\n", "deleted file mode 100644\n"} {
		if !strings.Contains(patch.String(), want) {
			t.Errorf("patch lacks %q:\n%s", want, patch.String())
		}
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", l.Lower, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	for _, args := range [][]string{{"apply", "--check"}, {"apply"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Stdin = cp, bytes.NewReader(patch.Bytes())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s\n%s", strings.Join(args, " "), err, out, patch.String())
		}
	}
	want := map[string]string{
		"keep.txt": "keep\n", "mod.txt": "one\nTWO\nthree\n", "moved.txt": "rename me, whole\n", "mode.sh": "#!/bin/sh\n",
		"bin.dat": "\x00\x01new", "new.txt": "new\n", "dir/c": "c\n", "conflict.txt": "sandbox\n", "tree/a/b/deep.txt": "deep\n",
	}
	for p, content := range want {
		if b, err := os.ReadFile(filepath.Join(cp, p)); err != nil || string(b) != content {
			t.Errorf("%s after git apply: %q, %v; want %q", p, b, err, content)
		}
	}
	for _, p := range []string{"del.txt", "ren.txt", "dir/a", "gone/x"} {
		if _, err := os.Lstat(filepath.Join(cp, p)); err == nil {
			t.Errorf("%s still there after git apply", p)
		}
	}
	if target, err := os.Readlink(filepath.Join(cp, "link")); err != nil || target != "keep.txt" {
		t.Errorf("link after git apply: %q, %v", target, err)
	}
	if fi, err := os.Stat(filepath.Join(cp, "mode.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("mode.sh after git apply: %v, %v", fi, err)
	}
}

func TestApplyConflictsProtectedAndEmptyAfter(t *testing.T) {
	l := newLayers(t, project)
	sandboxWork(t, l)
	put(t, l.Lower, "conflict.txt", "host v2\n", 0o644)
	dry, err := l.Apply(ApplyOptions{ProtectedPaths: protected, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(l.Lower, "mod.txt")); string(b) != project["mod.txt"] {
		t.Fatalf("--dry-run changed the project: %q", b)
	}
	res, err := l.Apply(ApplyOptions{ProtectedPaths: protected, Umask: 0o022})
	if err != nil {
		t.Fatal(err)
	}
	if d, a := summary(dry.Applied), summary(res.Applied); !slices.Equal(slices.Sorted(slices.Values(d)), slices.Sorted(slices.Values(a))) {
		t.Errorf("dry run said %v, apply did %v", summary(dry.Applied), summary(res.Applied))
	}
	checkChanges(t, res.Conflicts, "modified file conflict.txt conflict")
	checkChanges(t, res.Skipped, "added file .git/hooks/pre-commit protected=.git/hooks")
	if b, _ := os.ReadFile(filepath.Join(l.Lower, "conflict.txt")); string(b) != "host v2\n" {
		t.Errorf("the conflict was overwritten: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, ".git/hooks/pre-commit")); err == nil {
		t.Error("a protected path was applied")
	}
	for p, content := range map[string]string{"mod.txt": "one\nTWO\nthree\n", "moved.txt": "rename me, whole\n", "bin.dat": "\x00\x01new", "dir/c": "c\n", "tree/a/b/deep.txt": "deep\n"} {
		if b, err := os.ReadFile(filepath.Join(l.Lower, p)); err != nil || string(b) != content {
			t.Errorf("%s after apply: %q, %v", p, b, err)
		}
	}
	for _, p := range []string{"del.txt", "ren.txt", "dir/a", "dir/b", "gone"} {
		if _, err := os.Lstat(filepath.Join(l.Lower, p)); err == nil {
			t.Errorf("%s still in the project", p)
		}
	}
	if fi, err := os.Stat(filepath.Join(l.Lower, "mode.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode.sh: %v, %v", fi, err)
	}
	// What was applied left the upper layer: the next diff shows only what was not.
	after, err := l.Changes(protected, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, after, "added file .git/hooks/pre-commit protected=.git/hooks", "modified file conflict.txt conflict")
	if _, err := os.Lstat(filepath.Join(l.Upper(), "mod.txt")); err == nil {
		t.Error("an applied file stayed in the upper layer")
	}
	// With the protected path named, it is applied too.
	if _, err := l.Apply(ApplyOptions{ProtectedPaths: protected, IncludeProtected: true, Paths: []string{".git"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, ".git/hooks/pre-commit")); err != nil {
		t.Errorf("--include-protected: %v", err)
	}
}

func TestDiscard(t *testing.T) {
	l := newLayers(t, project)
	sandboxWork(t, l)
	// A deletion inside a directory the sandbox replaced whole cannot go alone.
	if _, err := l.Discard([]string{"dir/a"}); err == nil || !strings.Contains(err.Error(), "dir/a lies in dir") {
		t.Fatalf("discard dir/a: %v", err)
	}
	if _, err := l.Discard([]string{"new.txt", "moved.txt"}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Changes(protected, []string{"new.txt", "moved.txt", "ren.txt"})
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, got)
	if _, err := l.Discard(nil); err != nil {
		t.Fatal(err)
	}
	if got, err = l.Changes(protected, nil); err != nil {
		t.Fatal(err)
	}
	checkChanges(t, got)
	if b, _ := os.ReadFile(filepath.Join(l.Lower, "mod.txt")); string(b) != project["mod.txt"] {
		t.Fatalf("discard changed the project: %q", b)
	}
}

// unreadableEnv runs TestUnreadableAsOwner's own part in a child process as a user who is
// not root, with the layers' directory it names.
const unreadableEnv = "SBX_OVERLAY_TEST_UNREADABLE"

// TestUnreadableAsOwner: a file the sandbox made 0000, in a directory it made 0500, is read
// by sbx running as its owner (not root) by giving it the owner's read bit for the moment it
// is opened; diff shows it, apply writes it with its mode, and both modes are back after.
func TestUnreadableAsOwner(t *testing.T) {
	if dir := os.Getenv(unreadableEnv); dir != "" {
		unreadableChild(t, dir)
		return
	}
	l := newLayers(t, map[string]string{"keep.txt": "keep\n"})
	const uid = 1000
	put(t, l.Upper(), "locked/secret", "made 0000\n", 0o000)
	if err := os.Chmod(filepath.Join(l.Upper(), "locked"), 0o500); err != nil {
		t.Fatal(err)
	}
	base := filepath.Dir(l.Dir)
	bin := filepath.Join(base, "overlay.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", uid, uid), base).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run", "^TestUnreadableAsOwner$", "-test.v")
	cmd.Env = append(os.Environ(), unreadableEnv+"="+l.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestUnreadableAsOwner") {
		t.Fatalf("as uid %d: %v\n%s", uid, err, out)
	}
	for p, want := range map[string]os.FileMode{"locked": 0o500, "locked/secret": 0} {
		fi, err := os.Lstat(filepath.Join(l.Upper(), p))
		if p == "locked/secret" && err == nil {
			t.Errorf("applied %s stayed in the upper layer", p)
			continue
		}
		if p == "locked" && (err != nil || fi.Mode().Perm() != want) {
			t.Errorf("upper %s: %v, %v; want mode %o", p, fi, err, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(l.Lower, "locked/secret")); err != nil || fi.Mode().Perm() != 0 {
		t.Errorf("applied locked/secret: %v, %v; want mode 0000", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(l.Lower, "locked/secret")); string(b) != "made 0000\n" {
		t.Errorf("applied locked/secret holds %q", b)
	}
}

func unreadableChild(t *testing.T, dir string) {
	if os.Geteuid() == 0 {
		t.Fatal("the child runs as root")
	}
	l := Layers{Lower: filepath.Join(filepath.Dir(dir), "project"), Dir: dir}
	changes, err := l.Changes(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, changes, "added dir locked", "added file locked/secret")
	var patch bytes.Buffer
	if err := l.Patch(&patch, changes); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(patch.String(), "+made 0000\n") {
		t.Fatalf("patch:\n%s", patch.String())
	}
	fi, err := os.Lstat(filepath.Join(l.Upper(), "locked/secret"))
	if err != nil || fi.Mode().Perm() != 0 {
		t.Fatalf("the diff left locked/secret %v, %v; want mode 0000", fi, err)
	}
	res, err := l.Apply(ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(summary(res.Applied))
	t.Log("applied " + string(j) + " as uid " + strconv.Itoa(os.Geteuid()))
}

// A checkpoint records the upper layer, whiteouts, opaque marks and modes included; a
// rollback after more changes brings back exactly what the diff showed at the checkpoint.
func TestCheckpointRollback(t *testing.T) {
	l := newLayers(t, project)
	sandboxWork(t, l)
	put(t, l.Upper(), "locked/secret", "0000\n", 0o000)
	if err := os.Chmod(filepath.Join(l.Upper(), "locked"), 0o500); err != nil {
		t.Fatal(err)
	}
	before, err := l.Changes(protected, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := l.Checkpoint("one")
	if err != nil || cp.Label != "one" || cp.Size == 0 {
		t.Fatalf("checkpoint: %+v, %v", cp, err)
	}
	// More work after the checkpoint: a new file, a deletion, an edit, a re-opened directory.
	put(t, l.Upper(), "later.txt", "later\n", 0o644)
	whiteout(t, l, "keep.txt")
	put(t, l.Upper(), "mod.txt", "changed again\n", 0o644)
	if err := os.RemoveAll(filepath.Join(l.Upper(), "dir")); err != nil {
		t.Fatal(err)
	}
	if err := l.Rollback("one"); err != nil {
		t.Fatal(err)
	}
	after, err := l.Changes(protected, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, after, summary(before)...)
	for p, want := range map[string]os.FileMode{"locked": 0o500, "locked/secret": 0} {
		if fi, err := os.Lstat(filepath.Join(l.Upper(), p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s after rollback: %v, %v; want %o", p, fi, err, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(l.Upper(), "mod.txt")); string(b) != "one\nTWO\nthree\n" {
		t.Errorf("mod.txt after rollback: %q", b)
	}
	list, err := l.Checkpoints()
	if err != nil || len(list) != 1 || list[0].Label != "one" {
		t.Errorf("checkpoints %+v, %v", list, err)
	}
	if err := l.Rollback("two"); err == nil || !strings.Contains(err.Error(), `no checkpoint "two"`) {
		t.Errorf("rollback to a missing checkpoint: %v", err)
	}
	if _, err := l.Checkpoint("../x"); err == nil {
		t.Error("a label with a slash was accepted")
	}
}

// A repository the sandbox lays out under any name, and a link leaving the project, are
// protected; a directory the project already has with a HEAD only is not a repository.
func TestChangesProtectRepositoriesAndLeavingLinks(t *testing.T) {
	l := newLayers(t, map[string]string{"keep.txt": "k\n", "docs/HEAD": "not git\n"})
	up := l.Upper()
	for _, p := range []string{"bare/HEAD", "bare/config", "docs/notes"} {
		put(t, up, p, "x\n", 0o644)
	}
	put(t, up, "bare/objects/", "", 0)
	put(t, up, "bare/refs/", "", 0)
	for link, target := range map[string]string{"leak": "/etc/passwd", "up": "../x", "in": "keep.txt"} {
		if err := os.Symlink(target, filepath.Join(up, link)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Changes(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, got,
		"added dir bare protected="+protect.ReasonGitRepo+"",
		"added file bare/HEAD protected="+protect.ReasonGitRepo+"",
		"added file bare/config protected="+protect.ReasonGitRepo+"",
		"added dir bare/objects protected="+protect.ReasonGitRepo+"",
		"added dir bare/refs protected="+protect.ReasonGitRepo+"",
		"added file docs/notes",
		"added symlink in",
		"added symlink leak protected="+protect.ReasonLink+"",
		"added symlink up protected="+protect.ReasonLink+"")
	for _, c := range got {
		if c.Path == "leak" && c.Target != "/etc/passwd" {
			t.Errorf("leak: target %q", c.Target)
		}
	}
}
