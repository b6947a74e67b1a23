package protect

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// makeTree builds a project from paths: "dir/" is a directory, "name -> target" a link,
// anything else a file with the given content.
func makeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		content := files[name]
		p := filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(name, "/")))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(name, "/"):
			err := os.MkdirAll(p, 0o755)
			if err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(content, "-> "):
			if err := os.Symlink(strings.TrimPrefix(content, "-> "), p); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// listTree returns every path under root, to show that Find changes nothing.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, filepath.ToSlash(rel)+" "+d.Type().String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// gitDirFiles is what a git directory holds here, with hooks and config.
func gitDirFiles(dir string) map[string]string {
	return map[string]string{dir + "/HEAD": "ref: refs/heads/main\n", dir + "/objects/": "", dir + "/refs/": "",
		dir + "/hooks/": "", dir + "/hooks/pre-commit.sample": "#!/bin/sh\n", dir + "/config": "[core]\n\tbare = false\n"}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

var gitEntries = []string{".git/hooks", ".git/config", ".git/config.worktree"}

func find(t *testing.T, root string, entries []string) *Plan {
	t.Helper()
	before := listTree(t, root)
	plan, err := Find(root, entries, Options{})
	if err != nil {
		t.Fatalf("Find: %v (hint: %s)", err, errs.Hint(err))
	}
	if after := listTree(t, root); !slices.Equal(before, after) {
		t.Errorf("Find changed the tree:\nbefore %v\nafter  %v", before, after)
	}
	return plan
}

// summary renders mounts as "ro PATH" / "rw PATH" (plus "+dir"/"+file" when created), in order.
func summary(ms []Mount) []string {
	var out []string
	for _, m := range ms {
		s := "rw " + m.Path
		if m.ReadOnly {
			s = "ro " + m.Path
		}
		if m.Create != "" {
			s += " +" + m.Create
		}
		out = append(out, s)
	}
	return out
}

func wantMounts(t *testing.T, plan *Plan, want ...string) {
	t.Helper()
	if got := summary(plan.Mounts); !slices.Equal(got, want) {
		t.Errorf("mounts\n got  %q\n want %q", got, want)
	}
}

func TestRootRepository(t *testing.T) {
	root := makeTree(t, merge(gitDirFiles(".git"), map[string]string{
		".sbx.yaml": "memory: 512m\n", ".vscode/settings.json": "{}", "src/main.go": "package main\n", ".envrc": "x",
	}))
	plan := find(t, root, append([]string{".sbx.yaml", ".vscode", ".envrc", ".idea", ".claude/settings.json"}, gitEntries...))
	wantMounts(t, plan, "ro .envrc", "rw .git", "ro .sbx.yaml", "ro .vscode", "ro .git/config", "ro .git/hooks")
	for _, m := range plan.Mounts {
		if m.Reason == "" {
			t.Errorf("%s has no reason", m.Path)
		}
	}
	if plan.Root != root || len(plan.Warnings) != 0 {
		t.Errorf("root %q warnings %q", plan.Root, plan.Warnings)
	}
	// The built-in list on the same tree: nothing it names is missing from the mounts.
	plan = find(t, root, config.DefaultProtectedPaths)
	wantMounts(t, plan, "ro .envrc", "rw .git", "ro .sbx.yaml", "ro .vscode", "ro .git/config", "ro .git/hooks")
}

func TestNestedRepositoriesArePinnedAllTheWay(t *testing.T) {
	root := makeTree(t, merge(gitDirFiles(".git"), gitDirFiles("a/b/.git"), gitDirFiles("vendor/c/.git"), map[string]string{
		"a/b/.git/config.worktree": "", "a/b/file": "x", "a/b/node_modules/d/.git/HEAD": "ref: x\n",
	}))
	plan := find(t, root, gitEntries)
	// a/b/node_modules/d/.git has no hooks or config: both are created there too.
	wantMounts(t, plan,
		"rw .git", "rw a", "rw vendor",
		"ro .git/config", "ro .git/hooks", "rw a/b", "rw vendor/c",
		"rw a/b/.git", "rw a/b/node_modules", "rw vendor/c/.git",
		"ro a/b/.git/config", "ro a/b/.git/config.worktree", "ro a/b/.git/hooks", "rw a/b/node_modules/d", "ro vendor/c/.git/config", "ro vendor/c/.git/hooks",
		"rw a/b/node_modules/d/.git",
		"ro a/b/node_modules/d/.git/config +file", "ro a/b/node_modules/d/.git/hooks +dir")
	// Parents always come before children.
	for i, m := range plan.Mounts {
		for _, later := range plan.Mounts[i+1:] {
			if strings.HasPrefix(m.Path, later.Path+"/") {
				t.Errorf("%s is mounted before its parent %s", m.Path, later.Path)
			}
		}
	}
}

func TestSubmodules(t *testing.T) {
	root := makeTree(t, merge(gitDirFiles(".git"), gitDirFiles(".git/modules/libs/x"), gitDirFiles(".git/modules/libs/x/modules/y"), map[string]string{
		".git/modules/libs/x/config":           "[core]\n\tworktree = ../../../../libs/x\n\thooksPath = tools/hooks\n",
		".git/modules/libs/x/modules/y/config": "[core]\n\tworktree = ../../../../../../libs/x/y\n",
		"libs/x/.git":                          "gitdir: ../../.git/modules/libs/x\n",
		"libs/x/tools/hooks/":                  "",
		"libs/x/y/.git":                        "gitdir: ../../../.git/modules/libs/x/modules/y\n",
		".git/modules/not-a-repo/file":         "",
	}))
	plan := find(t, root, gitEntries)
	wantMounts(t, plan,
		"rw .git", "rw libs",
		"ro .git/config", "ro .git/hooks", "rw .git/modules", "rw libs/x",
		"rw .git/modules/libs", "ro libs/x/.git", "rw libs/x/tools", "rw libs/x/y",
		"rw .git/modules/libs/x", "ro libs/x/tools/hooks", "ro libs/x/y/.git",
		"ro .git/modules/libs/x/config", "ro .git/modules/libs/x/hooks", "rw .git/modules/libs/x/modules",
		"rw .git/modules/libs/x/modules/y",
		"ro .git/modules/libs/x/modules/y/config", "ro .git/modules/libs/x/modules/y/hooks")
}

func TestGitFile(t *testing.T) {
	// A linked worktree: its git directory is outside the project.
	root := makeTree(t, map[string]string{".git": "gitdir: /elsewhere/.git/worktrees/p\n", "x": ""})
	wantMounts(t, find(t, root, gitEntries), "ro .git")

	// A bare repository beside its worktrees (.git: gitdir: ./.bare) is a git directory too.
	root = makeTree(t, merge(gitDirFiles(".bare"), map[string]string{".git": "gitdir: ./.bare\n"}))
	wantMounts(t, find(t, root, gitEntries), "rw .bare", "ro .git", "ro .bare/config", "ro .bare/hooks")

	// The main repository's linked worktrees: their commondir redirects git's config.
	root = makeTree(t, merge(gitDirFiles(".git"), map[string]string{
		".git/worktrees/wt/commondir": "../..\n", ".git/worktrees/wt/HEAD": "ref: x\n", ".git/worktrees/wt/config.worktree": "",
	}))
	wantMounts(t, find(t, root, gitEntries),
		"rw .git", "ro .git/config", "ro .git/hooks", "rw .git/worktrees",
		"rw .git/worktrees/wt", "ro .git/worktrees/wt/commondir", "ro .git/worktrees/wt/config.worktree")

	// A worktree inside the project whose .git file is read before its repository's
	// worktrees/: its directory is still recognised, and nothing is created in it.
	root = makeTree(t, merge(gitDirFiles("b/.git"), map[string]string{
		"a/.git": "gitdir: ../b/.git/worktrees/a\n", "b/.git/worktrees/a/commondir": "../..\n", "b/.git/worktrees/a/HEAD": "ref: x\n",
	}))
	wantMounts(t, find(t, root, gitEntries),
		"rw a", "rw b", "ro a/.git", "rw b/.git", "ro b/.git/config", "ro b/.git/hooks", "rw b/.git/worktrees",
		"rw b/.git/worktrees/a", "ro b/.git/worktrees/a/commondir")

	// A .git directory with a commondir takes its config and hooks from there: nothing is
	// created in it, and the common directory inside the project is protected.
	root = makeTree(t, merge(gitDirFiles("common"), map[string]string{".git/HEAD": "ref: x\n", ".git/commondir": "../common\n"}))
	wantMounts(t, find(t, root, gitEntries), "rw .git", "rw common", "ro .git/commondir", "ro common/config", "ro common/hooks")
}

func TestMissingHooksAndConfigAreCreated(t *testing.T) {
	root := makeTree(t, map[string]string{".git/HEAD": "ref: refs/heads/main\n", ".git/objects/": ""})
	uid, gid := os.Getuid(), os.Getgid()
	if os.Geteuid() == 0 {
		uid, gid = 4242, 4343
		if err := os.Chown(filepath.Join(root, ".git"), uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	plan := find(t, root, gitEntries)
	wantMounts(t, plan, "rw .git", "ro .git/config +file", "ro .git/hooks +dir")
	if err := plan.Prepare(); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]bool{"hooks": true, "config": false} {
		fi, err := os.Lstat(filepath.Join(root, ".git", name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.IsDir() != dir || (!dir && fi.Size() != 0) || int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s: dir %v size %d owner %d:%d, want dir %v, empty, %d:%d", name, fi.IsDir(), fi.Size(), st.Uid, st.Gid, dir, uid, gid)
		}
	}
	// Preparing again finds them there and is content.
	if err := plan.Prepare(); err != nil {
		t.Errorf("second Prepare: %v", err)
	}
	wantMounts(t, find(t, root, gitEntries), "rw .git", "ro .git/config", "ro .git/hooks")

	// Without the entries, nothing is created.
	root = makeTree(t, map[string]string{".git/HEAD": "ref: refs/heads/main\n"})
	wantMounts(t, find(t, root, []string{".git/config.worktree", ".vscode"}))
}

func TestPrepareDoesNotFollowALinkSwappedIn(t *testing.T) {
	root := makeTree(t, map[string]string{".git/HEAD": "ref: x\n", "elsewhere/": ""})
	plan := find(t, root, []string{".git/hooks"})
	if err := os.Rename(filepath.Join(root, ".git"), filepath.Join(root, "real-git")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("elsewhere", filepath.Join(root, ".git")); err != nil {
		t.Fatal(err)
	}
	err := plan.Prepare()
	if err == nil || !strings.Contains(err.Error(), "creating .git/hooks") {
		t.Errorf("Prepare through a link: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "elsewhere", "hooks")); err == nil {
		t.Error("Prepare followed the link")
	}
}

func TestLinksAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		entry string
		path  string
	}{
		{"protected path", map[string]string{".vscode": "-> /etc", ".git/HEAD": ""}, ".vscode", ".vscode"},
		{"protected path under .git", merge(gitDirFiles(".git"), map[string]string{".git/config": "-> ../cfg", "cfg": ""}), ".git/config", ".git/config"},
		{"hooks under .git", map[string]string{".git/HEAD": "", ".git/hooks": "-> /tmp"}, ".git/hooks", ".git/hooks"},
		{"ancestor", map[string]string{"a": "-> b", "b/c/": ""}, "a/c", "a"},
		{"the root's .git", map[string]string{".git": "-> real", "real/HEAD": ""}, ".git/hooks", ".git"},
		{"a nested .git", map[string]string{"x/y/.git": "-> /srv/repo"}, ".git/hooks", "x/y/.git"},
		{"a file git's config includes", merge(gitDirFiles(".git"), map[string]string{".git/config": "[include]\n\tpath = ../inc\n", "inc": "-> /x"}), ".git/config", "inc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := makeTree(t, tc.files)
			_, err := Find(root, []string{tc.entry}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.path+" is a symbolic link") || errs.ExitCode(err) != errs.CodeFailure {
				t.Fatalf("err = %v", err)
			}
			if h := errs.Hint(err); !strings.Contains(h, "replace the link") || !strings.Contains(h, "--workspace ro or none") {
				t.Errorf("hint %q", h)
			}
		})
	}
	// A link elsewhere in the tree is neither followed nor refused.
	root := makeTree(t, merge(gitDirFiles(".git"), map[string]string{"node_modules/.bin/x": "-> ../x/bin", "loop": "-> .", "out": "-> /"}))
	wantMounts(t, find(t, root, gitEntries), "rw .git", "ro .git/config", "ro .git/hooks")
}

func TestEntryCap(t *testing.T) {
	files := merge(gitDirFiles(".git"), gitDirFiles("deep/er/.git"))
	for i := 0; i < 40; i++ {
		files["wide/"+strings.Repeat("f", i+1)] = ""
	}
	root := makeTree(t, files)
	plan, err := Find(root, gitEntries, Options{MaxEntries: 20})
	if err != nil {
		t.Fatal(err)
	}
	// The root's repository is found first (breadth first); the deep one is past the cap.
	wantMounts(t, plan, "rw .git", "ro .git/config", "ro .git/hooks")
	if len(plan.Warnings) != 1 || !strings.Contains(plan.Warnings[0], "after 20 directory entries (the cap)") {
		t.Errorf("warnings %q", plan.Warnings)
	}
	// With room for all of it there is no warning, even at exactly the number of entries
	// visited: everything but the root and what is inside a .git directory.
	n := 0
	for _, p := range listTree(t, root) {
		if p, _, _ = strings.Cut(p, " "); p != "." && !strings.HasPrefix(p, ".git/") && !strings.Contains(p, "/.git/") {
			n++
		}
	}
	plan, err = Find(root, gitEntries, Options{MaxEntries: n})
	if err != nil || len(plan.Warnings) != 0 || !slices.Contains(summary(plan.Mounts), "ro deep/er/.git/hooks") {
		t.Errorf("cap %d: %v %q %q", n, err, plan.Warnings, summary(plan.Mounts))
	}
	if _, err := Find(root, gitEntries, Options{MaxEntries: n - 1}); err != nil {
		t.Fatal(err)
	}
	if plan, _ := Find(root, gitEntries, Options{MaxEntries: n - 1}); len(plan.Warnings) != 1 {
		t.Errorf("cap %d: no warning", n-1)
	}
}

func TestMountCap(t *testing.T) {
	root := makeTree(t, merge(gitDirFiles(".git"), gitDirFiles("a/.git")))
	if _, err := Find(root, gitEntries, Options{MaxMounts: 7}); err != nil {
		t.Fatalf("7 mounts under a cap of 7: %v", err)
	}
	_, err := Find(root, gitEntries, Options{MaxMounts: 6})
	if err == nil || !strings.Contains(err.Error(), "needs 7 bind mounts, more than the cap of 6") || !strings.Contains(errs.Hint(err), "--workspace ro or none") {
		t.Errorf("err %v hint %q", err, errs.Hint(err))
	}
}

func TestHooksPathAndIncludes(t *testing.T) {
	base := gitDirFiles(".git")
	for _, tc := range []struct {
		name, config string
		extra        map[string]string
		want         []string
		err          string
	}{
		{name: "relative", config: "[core]\n\thooksPath = tools/hooks\n", extra: map[string]string{"tools/hooks/pre-commit": ""},
			want: []string{"rw .git", "rw tools", "ro .git/config", "ro .git/hooks", "ro tools/hooks"}},
		{name: "absolute inside", config: "[core]\nhooksPath = \"ROOT/h\" ; comment\n", extra: map[string]string{"h/": ""},
			want: []string{"rw .git", "ro h", "ro .git/config", "ro .git/hooks"}},
		{name: "on the header's line, odd case", config: "[CORE] HooksPath=h\n", extra: map[string]string{"h/": ""},
			want: []string{"rw .git", "ro h", "ro .git/config", "ro .git/hooks"}},
		{name: "outside", config: "[core]\n\thooksPath = /usr/share/git-hooks\n[core]\nhooksPath = ~/hooks\n[core]\nhooksPath=../../up\n",
			want: []string{"rw .git", "ro .git/config", "ro .git/hooks"}},
		{name: "missing", config: "[core]\n\thooksPath = .husky/_\n", err: "core.hooksPath in .git/config names .husky/_, which does not exist"},
		{name: "the root", config: "[core]\n\thooksPath = .\n", err: "core.hooksPath in .git/config is the project root"},
		{name: "include", config: "[include]\n\tpath = ../.gitconfig.local\n[includeIf \"gitdir:~/w]k/\"]\n\tpath = more.inc\n",
			extra: map[string]string{".gitconfig.local": "[core]\nhooksPath = h2\n", ".git/more.inc": "[include]\npath = ../cfg/third\n", "cfg/third": "", "h2/": ""},
			want:  []string{"rw .git", "ro .gitconfig.local", "rw cfg", "ro h2", "ro .git/config", "ro .git/hooks", "ro .git/more.inc", "ro cfg/third"}},
		{name: "missing include", config: "[include]\n\tpath = ../local.inc\n", err: "included by .git/config names local.inc, which does not exist"},
		{name: "worktreeConfig", config: "[extensions]\n\tworktreeConfig\n", extra: map[string]string{".git/config.worktree": "[core]\nhooksPath = wh\n", "wh/": ""},
			want: []string{"rw .git", "ro wh", "ro .git/config", "ro .git/config.worktree", "ro .git/hooks"}},
		{name: "worktreeConfig without the file", config: "[extensions]\n\tworktreeConfig = yes\n",
			err: "extensions.worktreeConfig for .git names .git/config.worktree, which does not exist"},
		{name: "worktreeConfig without a linked worktree's file", config: "[extensions]\n\tworktreeConfig = 1\n",
			extra: map[string]string{".git/config.worktree": "", ".git/worktrees/w/commondir": "../..", ".git/worktrees/w/HEAD": "x"},
			err:   "extensions.worktreeConfig for .git/worktrees/w names .git/worktrees/w/config.worktree, which does not exist"},
		{name: "worktreeConfig off", config: "[extensions]\n\tworktreeConfig = false\n",
			want: []string{"rw .git", "ro .git/config", "ro .git/hooks"}},
		{name: "other sections", config: "[hooks]\n\tpath = nope\n[core \"x\"]\n\thooksPath = nope\n[alias]\n\thooksPath = nope\n",
			want: []string{"rw .git", "ro .git/config", "ro .git/hooks"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := merge(base, tc.extra)
			files[".git/config"] = tc.config
			root := makeTree(t, files)
			if err := os.WriteFile(filepath.Join(root, ".git", "config"), []byte(strings.ReplaceAll(tc.config, "ROOT", root)), 0o644); err != nil {
				t.Fatal(err)
			}
			plan, err := Find(root, gitEntries, Options{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || errs.Hint(err) == "" {
					t.Fatalf("err %v, want %q with a hint", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantMounts(t, plan, tc.want...)
		})
	}
	// ~/ starts from the home directory Find is given; without one it is outside.
	root := makeTree(t, merge(base, map[string]string{"h/": ""}))
	cfg := "[core]\n\thooksPath = ~/" + filepath.Base(root) + "/h\n"
	if err := os.WriteFile(filepath.Join(root, ".git", "config"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := Find(root, gitEntries, Options{Home: filepath.Dir(root)})
	if err != nil {
		t.Fatal(err)
	}
	wantMounts(t, plan, "rw .git", "ro h", "ro .git/config", "ro .git/hooks")
	wantMounts(t, find(t, root, gitEntries), "rw .git", "ro .git/config", "ro .git/hooks")

	// A config over the bound is refused rather than half read.
	root = makeTree(t, merge(base))
	big := "[core]\n" + strings.Repeat("# padding\n", MaxConfigSize/10+1)
	if err := os.WriteFile(filepath.Join(root, ".git", "config"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(root, gitEntries, Options{}); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("a config over 1 MiB: %v", err)
	}
}

// Odd file types are protected like files, and reading them never blocks.
func TestFIFOs(t *testing.T) {
	root := makeTree(t, map[string]string{".git/HEAD": "x", "sub/": ""})
	for _, p := range []string{".git/config", ".vscode", "sub/.git"} {
		if err := syscall.Mkfifo(filepath.Join(root, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantMounts(t, find(t, root, append([]string{".vscode"}, gitEntries...)), "rw .git", "ro .vscode", "rw sub", "ro .git/config", "ro .git/hooks +dir", "ro sub/.git")
}

func TestCoveredPathsAreNotMountedAgain(t *testing.T) {
	root := makeTree(t, merge(gitDirFiles(".git"), gitDirFiles(".git/modules/m")))
	// .git itself read-only covers its hooks, config and submodules: no pin may reopen them.
	wantMounts(t, find(t, root, []string{".git", ".git/hooks", ".git/config"}), "ro .git")
}

func TestEntriesMustBeClean(t *testing.T) {
	root := makeTree(t, map[string]string{"x": ""})
	for _, e := range []string{"", ".", "..", "../x", "/etc", "a/../b", "a/", "./a"} {
		if _, err := Find(root, []string{e}, Options{}); err == nil || !strings.Contains(err.Error(), "not a clean path") {
			t.Errorf("entry %q: %v", e, err)
		}
	}
	if _, err := Find(filepath.Join(root, "x"), nil, Options{}); err == nil {
		t.Error("a file as the root was accepted")
	}
}

func TestParseGitConfig(t *testing.T) {
	got := parseGitConfig([]byte(`# comment
[core]
	hooksPath = "with space/h" # trailing
	hooksPath = a\
b
	worktree = ../wt
	bare
[Core]hooksPath=c ; x
[include]
	path = "q\"uote"
[includeIf "gitdir:/x]y/"]
	path = cond.inc
[core "sub"]
	hooksPath = no
[core.sub]
	hooksPath = no
[other]
	hooksPath = no
[extensions]
	worktreeConfig ; on, written as a bare key
`))
	want := gitConfig{hooksPaths: []string{"with space/h", "ab", "c"}, worktrees: []string{"../wt"}, includes: []string{`q"uote`, "cond.inc"}, worktreeConfig: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// A config is the project's, so anything may be in it: the scan must end without panicking
// and report nothing longer than what it read.
func FuzzParseGitConfig(f *testing.F) {
	for _, seed := range []string{"[core]\n\thooksPath = h\n", "[includeIf \"gitdir:x]\"] path = \"a\\\"b\\\n", "[", "[core]hooksPath=\"", "k=\\", "[a.b]\nx\n;\n#"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := parseGitConfig(data)
		for _, v := range slices.Concat(cfg.hooksPaths, cfg.includes, cfg.worktrees) {
			if len(v) > len(data) {
				t.Fatalf("value %q longer than the input", v)
			}
		}
	})
}

// Covers names the protectedPaths entry that covers a project path: the entry, what is under
// it, and for .git/ entries the same place in any repository of the project.
func TestCovers(t *testing.T) {
	entries := []string{".sbx.yaml", ".git/hooks", ".git/config", ".vscode/"}
	for _, tt := range []struct{ path, want string }{
		{".sbx.yaml", ".sbx.yaml"},
		{".git/hooks/pre-commit", ".git/hooks"},
		{".git/hooks", ".git/hooks"},
		{"sub/repo/.git/hooks/post-checkout", ".git/hooks"},
		{"sub/.git/config", ".git/config"},
		{".vscode/settings.json", ".vscode"},
		{"./.git/config", ".git/config"},
		{".git/config.worktree", ""},
		{".git/hooksx", ""},
		{"sub/.sbx.yaml", ""},
		{"a.git/hooks/x", ""},
		{"src/main.go", ""},
	} {
		got, ok := Covers(entries, tt.path)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("Covers(%q) = %q, %v; want %q", tt.path, got, ok, tt.want)
		}
	}
}
