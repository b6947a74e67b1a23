package protect

import (
	"path"
	"strings"
)

// Reasons a Guard gives besides the protectedPaths entries.
const (
	ReasonGitDir  = "git's own files (.git)"
	ReasonGitRepo = "a git repository's own directory"
	ReasonLink    = "a link leaving the project"
)

// gitNames are the file names git obeys wherever they are in a work tree, by what Guard
// calls them: .git (a repository, or a pointer to one), .gitmodules (submodules' URLs and
// paths) and .gitattributes (which names the filter and diff drivers git runs).
var gitNames = map[string]string{
	".git":           ReasonGitDir,
	"git~1":          ReasonGitDir, // NTFS's short name of .git
	".gitmodules":    ".gitmodules",
	"gitmod~1":       ".gitmodules",
	".gitattributes": ".gitattributes (filter and diff drivers)",
}

// Guard decides which changes a sandbox made may reach the project on the host only when
// the user names them (sbx apply --include-protected): what protectedPaths covers, anything
// git itself obeys (a .git directory or file, .gitmodules, .gitattributes) at any depth and
// in any spelling a host file system takes for those names, what the project's git configs
// send git to (core.hooksPath, include.path), paths inside a directory laid out as a git
// repository, and links that leave the project. It is the one owner of that decision for
// every command that writes the sandbox's changes into the project.
type Guard struct {
	entries []string
	// named are project paths that a git config in the project sends git to, with why.
	named map[string]string
	// IsGitDir, when set, says whether project directory dir ("" is the root) would be a git
	// repository's own directory once the changes land (HEAD with objects and refs, or with
	// a commondir), so that one the sandbox makes under any name is protected too.
	IsGitDir func(dir string) bool
}

// NewGuard reads the project at root for what its git configs name (as Find does for a rw
// workspace, but a path that does not exist yet counts too) and returns the Guard for it
// and protectedPaths entries. It only reads the project.
func NewGuard(root string, entries []string, opts Options) (*Guard, error) {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	g := &Guard{entries: entries, named: map[string]string{}}
	f := &finder{root: root, opts: opts, found: map[string]*Mount{}, gitDirSeen: map[string]bool{}, collect: true}
	if err := f.walk(); err != nil {
		return nil, err
	}
	for p, m := range f.found {
		g.named[p] = m.Reason
	}
	return g, nil
}

// Covers returns why the project path rel is protected, if it is.
func (g *Guard) Covers(rel string) (string, bool) {
	rel = path.Clean(rel)
	if e, ok := Covers(g.entries, rel); ok {
		return e, true
	}
	parts := strings.Split(rel, "/")
	for _, c := range parts {
		if why, ok := gitNames[hostName(c)]; ok {
			return why, true
		}
	}
	for p, why := range g.named {
		if rel == p || strings.HasPrefix(rel, p+"/") || p == "." {
			return why, true
		}
	}
	if g.IsGitDir != nil {
		for i := range len(parts) + 1 {
			if g.IsGitDir(strings.Join(parts[:i], "/")) {
				return ReasonGitRepo, true
			}
		}
	}
	return "", false
}

// CoversLink is Covers for a link at rel pointing at target: one whose target leaves the
// project (absolute, or climbing past the root) is protected as well.
func (g *Guard) CoversLink(rel, target string) (string, bool) {
	if why, ok := g.Covers(rel); ok {
		return why, true
	}
	if LinkLeaves(rel, target) {
		return ReasonLink, true
	}
	return "", false
}

// LinkLeaves reports whether a link at project path rel pointing at target resolves outside
// the project, read as the kernel would from rel's directory (no link on the way followed).
func LinkLeaves(rel, target string) bool {
	if target == "" || path.IsAbs(target) {
		return true
	}
	p := path.Join(path.Dir(rel), target)
	return p == ".." || strings.HasPrefix(p, "../")
}

// hostName is a path component as a host file system may take it when it compares names:
// case-insensitive (macOS, Windows), without the trailing dots and spaces and the stream
// suffix NTFS ignores, and without the code points HFS+ ignores, as git's own checks do.
func hostName(c string) string {
	c = strings.Map(func(r rune) rune {
		switch {
		case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
			return -1
		}
		return r
	}, c)
	if i := strings.IndexByte(c, ':'); i >= 0 {
		c = c[:i]
	}
	return strings.ToLower(strings.TrimRight(c, ". "))
}
