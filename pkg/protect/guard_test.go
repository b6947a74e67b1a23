package protect

import "testing"

// The guard protects what git obeys wherever it is and however a host file system spells
// it, what the project's git configs name (even when it does not exist yet), paths in a
// directory laid out as a repository, and links that leave the project.
func TestGuard(t *testing.T) {
	root := makeTree(t, merge(gitDirFiles(".git"), map[string]string{
		".git/config":        "[core]\n\thooksPath = tools/hooks\n[include]\n\tpath = ../cfg/extra\n",
		"cfg/extra":          "[user]\n\tname = x\n",
		"sub/.git":           "gitdir: ../.git/modules/sub\n",
		"src/app.py":         "print()\n",
		"deep/inner/.gitdir": "not git\n",
	}))
	g, err := NewGuard(root, []string{".sbx.yaml", ".git/hooks"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	g.IsGitDir = func(dir string) bool { return dir == "bare" || dir == "a/b" }
	for _, tt := range []struct {
		path, want string
	}{
		{".sbx.yaml", ".sbx.yaml"},
		{".git/hooks/pre-commit", ".git/hooks"},
		{".git/commondir", ReasonGitDir},
		{".git/x/config", ReasonGitDir},
		{".git/modules/m/hooks/post-checkout", ReasonGitDir},
		{".git/worktrees/w/config.worktree", ReasonGitDir},
		{"sub/.git", ReasonGitDir},
		{"new/deep/.git/config", ReasonGitDir},
		{".GIT/config", ReasonGitDir},
		{".Git./config", ReasonGitDir},
		{".git /config", ReasonGitDir},
		{".g\u200cit/config", ReasonGitDir},
		{"GIT~1/config", ReasonGitDir},
		{".git::$INDEX_ALLOCATION/config", ReasonGitDir},
		{".gitmodules", ".gitmodules"},
		{"vendor/.GITMODULES", ".gitmodules"},
		{"a/.gitattributes", ".gitattributes (filter and diff drivers)"},
		{"tools/hooks/pre-commit", "core.hooksPath in .git/config"},
		{"tools/hooks", "core.hooksPath in .git/config"},
		{"cfg/extra", "included by .git/config"},
		{"bare/config", ReasonGitRepo},
		{"bare", ReasonGitRepo},
		{"a/b/c/HEAD", ReasonGitRepo},
		{"src/app.py", ""},
		{"tools/hooksx", ""},
		{"deep/inner/.gitdir", ""},
		{"a/x", ""},
		{".gitignore", ""},
	} {
		got, ok := g.Covers(tt.path)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("Covers(%q) = %q, %v; want %q", tt.path, got, ok, tt.want)
		}
	}
}

// A hooks path that does not exist yet is protected all the same: the sandbox could make it.
func TestGuardMissingHooksPath(t *testing.T) {
	root := makeTree(t, merge(gitDirFiles(".git"), map[string]string{
		".git/config": "[core]\n\thooksPath = .hooks-to-be\n",
	}))
	g, err := NewGuard(root, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if why, ok := g.Covers(".hooks-to-be/pre-commit"); !ok {
		t.Errorf("a missing core.hooksPath target should be protected: %q", why)
	}
}

func TestLinkLeaves(t *testing.T) {
	for _, tt := range []struct {
		rel, target string
		want        bool
	}{
		{"leak", "/etc/passwd", true},
		{"leak", "..", true},
		{"a/leak", "../../outside", true},
		{"a/b/leak", "../../../x", true},
		{"leak", "", true},
		{"a/in", "../src/app.py", false},
		{"in", "src/app.py", false},
		{"a/b/in", "../../x", false},
		{"in", ".", false},
	} {
		if got := LinkLeaves(tt.rel, tt.target); got != tt.want {
			t.Errorf("LinkLeaves(%q, %q) = %v, want %v", tt.rel, tt.target, got, tt.want)
		}
	}
	g := &Guard{named: map[string]string{}}
	if why, ok := g.CoversLink("leak", "/etc"); !ok || why != ReasonLink {
		t.Errorf("CoversLink of a link to /etc: %q %v", why, ok)
	}
	if why, ok := g.CoversLink(".git/x", "y"); !ok || why != ReasonGitDir {
		t.Errorf("CoversLink in .git: %q %v", why, ok)
	}
}
