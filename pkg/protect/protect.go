// Package protect finds what a read-write workspace must keep from the sandbox: the project
// paths that the user's own tools on the host obey (git's hooks and config, editor and agent
// settings), which get read-only bind mounts, and every directory on the way to them, which
// gets a read-write bind onto itself ("pinned") so that renaming an ancestor cannot carry a
// protected mount away (a mount point cannot be renamed or removed: EBUSY).
//
// Find only reads the project; Plan.Prepare makes the few things Find plans to create (an
// empty hooks directory or config file in a git directory that lacks one). Nothing is ever
// mounted that does not exist at create, so no placeholder appears on the host, and no
// symbolic link on the way to a protected path is followed: such a project is refused.
package protect

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Caps on the work Find does and on what it asks the engine for.
const (
	// DefaultMaxEntries bounds the directory entries read while looking for nested
	// repositories, so a huge tree (node_modules, build output) costs a bounded time.
	DefaultMaxEntries = 100_000
	// DefaultMaxMounts bounds the bind mounts of one sandbox: each costs a mount at every
	// start, and thousands would be a tree sbx should not guess about.
	DefaultMaxMounts = 512
	// MaxConfigSize bounds how much of a git config (or pointer file) is read.
	MaxConfigSize = 1 << 20
	// maxIncludeDepth is git's own limit on nested config includes.
	maxIncludeDepth = 10
)

// What Prepare creates for a mount that does not exist yet.
const (
	CreateDir  = "dir"
	CreateFile = "file"
)

// Mount is one project path a rw sandbox gets as a bind mount of its own.
type Mount struct {
	// Path is relative to the project root, slash-separated and clean.
	Path string `json:"path"`
	// ReadOnly marks a protected path; a pin (false) is a directory on the way to one,
	// mounted read-write onto itself.
	ReadOnly bool `json:"readOnly"`
	// Reason says why, for explain: the protectedPaths entry, a git pointer, a config key.
	Reason string `json:"reason"`
	// Create is CreateDir or CreateFile when the path is missing and Prepare makes it empty.
	Create string `json:"create,omitempty"`
}

// Plan is what Find decided for one project.
type Plan struct {
	Root   string  `json:"root"`
	Mounts []Mount `json:"mounts"` // parents before children
	// Warnings are for stderr: the search stopped early, so part of the tree is not covered.
	Warnings []string `json:"warnings,omitempty"`
}

// Options bound Find; zero values take the defaults.
type Options struct {
	MaxEntries int
	MaxMounts  int
	// Home is the user's home directory, which git paths written ~/... start from; without
	// it such a path counts as outside the project.
	Home string
}

// Find plans the mounts that protect entries (protectedPaths) in the project at root.
// Entries whose first component is .git apply to every git directory found: the root's,
// nested repositories' and submodules' (<gitdir>/modules/**), and a .git file's target
// inside the project; the others apply at the root. Besides them it protects .git pointer
// files, existing commondir files (both redirect git), and what a git config in the project
// sends git to for hooks or more config when it lies inside the project (core.hooksPath,
// include.path, includeIf.*.path, config.worktree under extensions.worktreeConfig); such a
// path that is missing is refused. It reads but never changes the tree.
func Find(root string, entries []string, opts Options) (*Plan, error) {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxMounts <= 0 {
		opts.MaxMounts = DefaultMaxMounts
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("protected paths: reading the project root: %w", err), "")
	}
	if !fi.IsDir() {
		return nil, errs.Failure(fmt.Errorf("protected paths: the project root %s is not a directory", root), "")
	}
	f := &finder{root: root, opts: opts, found: map[string]*Mount{}, gitDirSeen: map[string]bool{}}
	var rootEntries []string
	for _, e := range entries {
		if err := checkEntry(e); err != nil {
			return nil, err
		}
		if rest, ok := strings.CutPrefix(e, ".git"); ok && (rest == "" || rest[0] == '/') {
			f.gitEntries = append(f.gitEntries, strings.TrimPrefix(rest, "/"))
		} else {
			rootEntries = append(rootEntries, e)
		}
	}
	if err := f.walk(); err != nil {
		return nil, err
	}
	for _, e := range rootEntries {
		if _, err := f.protect(e, "protectedPaths entry "+e, ""); err != nil {
			return nil, err
		}
	}
	if f.capped {
		f.warnings = append(f.warnings, fmt.Sprintf("protected paths: stopped looking for nested git repositories after %d directory entries (the cap); repositories further down the project are not protected", opts.MaxEntries))
	}
	mounts := f.mounts()
	if len(mounts) > opts.MaxMounts {
		return nil, errs.Failure(fmt.Errorf("protected paths: the project at %s needs %d bind mounts, more than the cap of %d", root, len(mounts), opts.MaxMounts),
			"shorten protectedPaths, move nested repositories out of the project, or use --workspace ro or none")
	}
	return &Plan{Root: root, Mounts: mounts, Warnings: f.warnings}, nil
}

// checkEntry refuses what the config package should already have: an entry must be a clean
// relative path below the root.
func checkEntry(e string) error {
	if e == "" || e == "." || path.IsAbs(e) || path.Clean(e) != e || e == ".." || strings.HasPrefix(e, "../") {
		return errs.Failure(fmt.Errorf("protectedPaths entry %q is not a clean path relative to the project root", e),
			"write it like .git/hooks or .vscode, without .., a leading / or a trailing /")
	}
	return nil
}

// gitDir is a directory git uses as its repository, relative to the root.
type gitDir struct {
	path string
	// worktree is where a relative core.hooksPath starts: the directory holding the .git.
	// ok is false when sbx cannot tell (a submodule's git dir without core.worktree).
	worktree   string
	worktreeOK bool
	// admin marks a linked worktree's directory (<gitdir>/worktrees/<id>, with a commondir),
	// which holds no hooks or config of its own, so nothing is created there.
	admin bool
	// worktreeConfig is set on a worktree's directory when its repository's config turns
	// extensions.worktreeConfig on.
	worktreeConfig bool
}

type finder struct {
	root       string
	opts       Options
	gitEntries []string // protectedPaths entries under .git/, without it ("" for .git itself)
	visited    int
	capped     bool
	found      map[string]*Mount // protected paths by Path
	gitDirSeen map[string]bool
	warnings   []string
	// collect records every path a git config names, existing or not, and refuses nothing:
	// NewGuard wants the names, not mounts.
	collect bool
}

func (f *finder) abs(rel string) string { return filepath.Join(f.root, filepath.FromSlash(rel)) }

// addGitDir handles a git directory when it is first found, so that its submodules are
// searched before the rest of the tree spends the cap.
func (f *finder) addGitDir(g gitDir) error {
	if f.gitDirSeen[g.path] {
		return nil
	}
	f.gitDirSeen[g.path] = true
	// A linked worktree's directory has a commondir, however it was reached (a .git file
	// may point at one before its repository's worktrees/ is searched).
	if fi, err := os.Lstat(f.abs(g.path + "/commondir")); err == nil && fi.Mode().IsRegular() {
		g.admin = true
	}
	return f.gitDir(g)
}

// readDir reads the entries of rel that fit under the cap; it sets capped when some do not.
func (f *finder) readDir(rel string) ([]fs.DirEntry, error) {
	d, err := openDirNoFollow(f.abs(rel))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var list []fs.DirEntry
	for {
		left := f.opts.MaxEntries - f.visited
		if left <= 0 {
			// Only an entry that is really there is one too many.
			if more, _ := d.ReadDir(1); len(more) > 0 {
				f.capped = true
			}
			return list, nil
		}
		batch, err := d.ReadDir(min(left, 1024))
		f.visited += len(batch)
		list = append(list, batch...)
		if errors.Is(err, io.EOF) {
			return list, nil
		}
		if err != nil {
			return list, err
		}
	}
}

// walk looks for .git entries breadth first, so the shallow ones are found before the cap.
// It never follows a link and never enters a .git directory (gitDir looks at modules/).
func (f *finder) walk() error {
	queue := []string{""}
	for len(queue) > 0 && !f.capped {
		dir := queue[0]
		queue = queue[1:]
		list, err := f.readDir(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			continue // gone, or a directory the user cannot read: git cannot use it either
		}
		if err != nil {
			return errs.Failure(fmt.Errorf("protected paths: reading %s: %w", f.abs(dir), err), "")
		}
		slices.SortFunc(list, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range list {
			rel := path.Join(dir, e.Name())
			var err error
			switch {
			case e.Name() == ".git" && e.Type()&fs.ModeSymlink != 0:
				if f.collect {
					continue // any .git is protected by name
				}
				return symlinkError(rel)
			case e.Name() == ".git" && e.IsDir():
				err = f.addGitDir(gitDir{path: rel, worktree: dir, worktreeOK: true})
			case e.Name() == ".git":
				// A pointer file, or something odd that the sandbox must not replace either.
				err = f.pointer(rel)
			case e.IsDir():
				queue = append(queue, rel)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// pointer protects a .git file (gitdir: PATH): rewritten, it could send git to a directory
// the sandbox made. A target inside the project is a git directory like any other.
func (f *finder) pointer(rel string) error {
	if _, err := f.protect(rel, "git pointer file (gitdir: ...)", ""); err != nil {
		return err
	}
	target, ok := f.readPointer(rel, "gitdir:")
	if !ok {
		return nil
	}
	return f.addGitDir(gitDir{path: target, worktree: path.Dir(rel), worktreeOK: true})
}

// readPointer reads a file holding a path (after prefix) to a git directory, relative to the
// file's directory, and returns that directory when it lies inside the project.
func (f *finder) readPointer(rel, prefix string) (string, bool) {
	data, err := readBounded(f.abs(rel))
	if err != nil {
		return "", false // unreadable to us, so git cannot follow it either
	}
	line, _, _ := strings.Cut(string(data), "\n")
	target, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
	if !ok {
		return "", false
	}
	dir, ok := f.inside(strings.TrimSpace(target), path.Dir(rel))
	return dir, ok && dir != ""
}

// inside resolves a path written in a file under base (relative to the root) and reports
// whether it lies inside the project; "" is the root itself.
func (f *finder) inside(p, base string) (string, bool) {
	if rest, ok := strings.CutPrefix(p, "~/"); ok && f.opts.Home != "" {
		p = filepath.Join(f.opts.Home, rest)
	}
	if p == "" || strings.HasPrefix(p, "~") || strings.HasPrefix(p, "%(") {
		return "", false // another user's home, or git's install prefix: outside the project
	}
	if filepath.IsAbs(p) {
		rel, err := filepath.Rel(f.root, filepath.Clean(p))
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "", false
		}
		p = filepath.ToSlash(rel)
	} else {
		p = path.Join(base, filepath.ToSlash(p))
	}
	p = path.Clean(p)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	if p == "." {
		return "", true
	}
	return p, true
}

// gitDir applies the .git entries to g, protects its commondir (a redirect of its config),
// follows its config to hooks and included files, and adds its submodules and worktrees.
func (f *finder) gitDir(g gitDir) error {
	for _, rest := range f.gitEntries {
		p, entry, create := g.path, ".git", ""
		if rest != "" {
			p, entry = g.path+"/"+rest, ".git/"+rest
		}
		if !g.admin {
			switch rest {
			case "hooks":
				create = CreateDir
			case "config":
				create = CreateFile
			}
		}
		if _, err := f.protect(p, "protectedPaths entry "+entry, create); err != nil {
			return err
		}
	}
	commondir := g.path + "/commondir"
	if found, err := f.protect(commondir, "git commondir file (names the directory of the repository's config and hooks)", ""); err != nil {
		return err
	} else if found {
		if target, ok := f.readPointer(commondir, ""); ok {
			if err := f.addGitDir(gitDir{path: target}); err != nil {
				return err
			}
		}
	}
	worktreeConfig, err := f.followConfig(g)
	if err != nil {
		return err
	}
	worktreeConfig = worktreeConfig || g.worktreeConfig
	if worktreeConfig && slices.Contains(f.gitEntries, "config.worktree") {
		// git would read one the sandbox creates: it must exist to be protected.
		if err := f.mustProtect(g.path+"/config.worktree", "extensions.worktreeConfig for "+g.path, "a config file that git on the host would read"); err != nil {
			return err
		}
	}
	if g.admin {
		return nil
	}
	if err := f.modules(g.path+"/modules", 0); err != nil {
		return err
	}
	return f.worktrees(g.path+"/worktrees", worktreeConfig)
}

// modules finds submodules' git directories under dir: a directory with a HEAD file is one
// (and its own modules/ is searched in turn); any other is part of a name with slashes.
func (f *finder) modules(dir string, depth int) error {
	if depth > 64 {
		return nil
	}
	list, err := f.subdirs(dir)
	if err != nil {
		return err
	}
	for _, name := range list {
		sub := dir + "/" + name
		head, err := os.Lstat(f.abs(sub + "/HEAD"))
		if err != nil || !head.Mode().IsRegular() {
			if err := f.modules(sub, depth+1); err != nil {
				return err
			}
			continue
		}
		g := gitDir{path: sub}
		if g.worktree, g.worktreeOK, err = f.coreWorktree(sub); err != nil {
			return err
		}
		if err := f.addGitDir(g); err != nil {
			return err
		}
	}
	return nil
}

// worktrees adds linked worktrees' directories (<gitdir>/worktrees/<id>), whose commondir
// and config.worktree git obeys.
func (f *finder) worktrees(dir string, worktreeConfig bool) error {
	list, err := f.subdirs(dir)
	if err != nil {
		return err
	}
	for _, name := range list {
		if err := f.addGitDir(gitDir{path: dir + "/" + name, admin: true, worktreeConfig: worktreeConfig}); err != nil {
			return err
		}
	}
	return nil
}

// subdirs lists the directories (not links) in dir, counted against the cap; a missing or
// unreadable dir has none. A link is refused only when it is on the way to a protected path.
func (f *finder) subdirs(dir string) ([]string, error) {
	fi, err := os.Lstat(f.abs(dir))
	if err != nil || !fi.IsDir() {
		return nil, nil
	}
	list, err := f.readDir(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("protected paths: reading %s: %w", f.abs(dir), err), "")
	}
	var out []string
	for _, e := range list {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// protect records rel as protected when it exists, checking every component without
// following links. A missing rel is skipped, or planned for creation when create is set and
// its parent is a directory. found reports whether it was recorded.
func (f *finder) protect(rel, reason, create string) (found bool, err error) {
	if f.collect {
		f.record(Mount{Path: rel, ReadOnly: true, Reason: reason})
		return true, nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		fi, err := os.Lstat(f.abs(sub))
		last := i == len(parts)-1
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			if last && create != "" {
				f.record(Mount{Path: rel, ReadOnly: true, Reason: reason, Create: create})
				return true, nil
			}
			return false, nil
		case err != nil:
			return false, errs.Failure(fmt.Errorf("protected paths: checking %s: %w", f.abs(sub), err), "")
		case fi.Mode()&fs.ModeSymlink != 0:
			return false, symlinkError(sub)
		case !last && !fi.IsDir():
			return false, nil // a file where a directory would be: the path cannot exist
		}
	}
	f.record(Mount{Path: rel, ReadOnly: true, Reason: reason})
	return true, nil
}

func (f *finder) record(m Mount) {
	if _, ok := f.found[m.Path]; !ok {
		f.found[m.Path] = &m
	}
}

func symlinkError(rel string) error {
	return errs.Failure(fmt.Errorf("protected paths: %s is a symbolic link; a rw sandbox could repoint it, so sbx will not mount it or follow it", rel),
		"replace the link with the file or directory it points to, or use --workspace ro or none")
}

// mounts returns the protected paths, without those inside another protected directory (it
// covers them, and a pin under it would make part of it writable again), plus a pin for every
// directory on the way to each, parents before children.
func (f *finder) mounts() []Mount {
	paths := make([]string, 0, len(f.found))
	for p := range f.found {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var out []Mount
	pins := map[string]string{}
	for _, p := range paths {
		if coveredBy(p, f.found) {
			continue
		}
		out = append(out, *f.found[p])
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := pins[d]; !ok {
				pins[d] = p
			}
		}
	}
	for d, child := range pins {
		out = append(out, Mount{Path: d, Reason: "pinned: on the way to " + child})
	}
	SortMounts(out)
	return out
}

// coveredBy reports whether a proper ancestor of p is protected itself.
func coveredBy(p string, found map[string]*Mount) bool {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if _, ok := found[d]; ok {
			return true
		}
	}
	return false
}

// SortMounts orders mounts parents before children: by depth, then by path. The engine sorts
// by depth as well (moby's sortMounts), but not stably, and other engines may not sort.
func SortMounts(ms []Mount) {
	slices.SortStableFunc(ms, func(a, b Mount) int {
		if da, db := strings.Count(a.Path, "/"), strings.Count(b.Path, "/"); da != db {
			return da - db
		}
		return strings.Compare(a.Path, b.Path)
	})
}

// readBounded reads a regular file without following a link, refusing one over MaxConfigSize.
func readBounded(name string) ([]byte, error) {
	fh, err := openFileNoFollow(name)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(fh, MaxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxConfigSize {
		return nil, errTooLarge
	}
	return data, nil
}

var errTooLarge = fmt.Errorf("larger than %d bytes", MaxConfigSize)

// Covers returns the entry of entries (protectedPaths, relative to the project root) that
// covers the project path rel: the entry itself or anything under it, and for entries under
// .git/ the same path in any repository of the project (a/.git/hooks/x). Other commands that
// change the project (sbx apply) ask it, so what counts as protected has one owner.
func Covers(entries []string, rel string) (string, bool) {
	rel = path.Clean(filepath.ToSlash(rel))
	under := func(p, e string) bool { return p == e || strings.HasPrefix(p, e+"/") }
	for _, e := range entries {
		e = path.Clean(filepath.ToSlash(e))
		if under(rel, e) {
			return e, true
		}
		if rest, ok := strings.CutPrefix(e, ".git/"); ok {
			for i := 0; i+len("/.git/") <= len(rel); i++ {
				if strings.HasPrefix(rel[i:], "/.git/") && under(rel[i+len("/.git/"):], rest) {
					return e, true
				}
			}
		}
	}
	return "", false
}
