package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// ProjectFileName is the project's config file, at the project root.
const ProjectFileName = ".sbx.yaml"

// How the project root was found.
const (
	RootFromFlag    = "--project"
	RootFromFile    = ProjectFileName
	RootFromGit     = "git"
	RootFromWorkDir = "working directory"
)

// ValidName checks a sandbox name: [a-z0-9][a-z0-9_.-]{0,62}.
func ValidName(name string) error {
	if !isName(name) {
		return fmt.Errorf("invalid sandbox name %q: use 1 to 63 lower-case letters, digits, '_', '.' or '-', starting with a letter or digit", name)
	}
	return nil
}

// DefaultName is a project's sandbox name: the slug of the root's base name, "-", and the
// first 6 hex digits of the SHA-256 of its absolute path, so two projects called app differ.
func DefaultName(projectRoot string) string {
	abs, err := filepath.Abs(projectRoot)
	if err != nil {
		abs = filepath.Clean(projectRoot)
	}
	sum := sha256.Sum256([]byte(abs))
	suffix := "-" + hex.EncodeToString(sum[:])[:6]
	slug := slugify(filepath.Base(abs))
	if limit := 63 - len(suffix); len(slug) > limit {
		slug = strings.TrimRight(slug[:limit], "-_.")
	}
	if slug == "" {
		slug = "project"
	}
	return slug + suffix
}

func slugify(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.'
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-_.")
}

// UserConfigPath is $XDG_CONFIG_HOME/sbx/config.yaml, or ~/.config/sbx/config.yaml when
// XDG_CONFIG_HOME is unset or not absolute (as the XDG spec says). "" when neither is known.
func UserConfigPath(getenv func(string) string, home string) string {
	if x := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "sbx", "config.yaml")
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".config", "sbx", "config.yaml")
}

// Discovery is how FindProjectRoot looks at the file system; zero values use the real one.
type Discovery struct {
	// GitTopLevel finds the git top-level of a directory; nil walks up for .git.
	GitTopLevel func(dir string) (string, bool)
	// Ownership tells who owns a path (not following a last symlink); nil lstats it.
	Ownership func(path string) (Ownership, error)
	// UID is the user sbx runs as; nil asks the kernel.
	UID func() int
}

// Ownership is a path's owner and permission bits.
type Ownership struct {
	UID  int
	Mode fs.FileMode
}

// Skipped is a .sbx.yaml or .git that discovery passed over because someone else controls it.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// String is the warning sbx prints about it.
func (s Skipped) String() string {
	return fmt.Sprintf("ignoring %s: %s; a file another user controls never configures your sandboxes", s.Path, s.Reason)
}

// FindProjectRoot returns the project root and how it was found: projectDir (--project) when
// given, else the nearest ancestor of wd holding .sbx.yaml, else the git top-level, else wd.
// The result is absolute and free of symlinks, so one project always gets one default name.
// As git's safe.directory does, it passes over a .sbx.yaml or .git that another user owns
// (root aside) or that anyone may replace, and goes on upward as if it were absent: a file
// planted in a shared directory such as /tmp must not configure every sbx run below it.
func FindProjectRoot(wd, projectDir string, d Discovery) (root, from string, skipped []Skipped, err error) {
	wd = canonical(wd)
	if projectDir != "" {
		if !filepath.IsAbs(projectDir) {
			projectDir = filepath.Join(wd, projectDir)
		}
		fi, err := os.Stat(projectDir)
		if err != nil {
			return "", "", nil, fmt.Errorf("--project %s: %w", projectDir, err)
		}
		if !fi.IsDir() {
			return "", "", nil, fmt.Errorf("--project %s: not a directory", projectDir)
		}
		return canonical(projectDir), RootFromFlag, nil, nil
	}
	if d.Ownership == nil {
		d.Ownership = lstatOwnership
	}
	uid := os.Geteuid()
	if d.UID != nil {
		uid = d.UID()
	}
	safe := func(entry string) bool {
		reason := unsafeReason(d.Ownership, uid, entry)
		if reason != "" {
			skipped = append(skipped, Skipped{Path: entry, Reason: reason})
		}
		return reason == ""
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, ProjectFileName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && safe(p) {
			return dir, RootFromFile, skipped, nil
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	if d.GitTopLevel == nil {
		d.GitTopLevel = GitTopLevel
	}
	for dir := wd; ; {
		top, ok := d.GitTopLevel(dir)
		if !ok {
			break
		}
		if safe(filepath.Join(top, ".git")) {
			return canonical(top), RootFromGit, skipped, nil
		}
		if top == filepath.Dir(top) {
			break
		}
		dir = filepath.Dir(top)
	}
	return wd, RootFromWorkDir, skipped, nil
}

// unsafeReason says why someone other than uid (and root) controls entry (a .sbx.yaml or .git)
// or could swap it: it, a link it is, or its directory belongs to another user, or is
// writable by everyone (a sticky directory such as /tmp protects entries from other users).
func unsafeReason(own func(string) (Ownership, error), uid int, entry string) string {
	check := func(p, what string) string {
		o, err := own(p)
		if err != nil {
			return "cannot check its owner: " + unwrapPathError(err)
		}
		switch {
		case o.UID != uid && o.UID != 0:
			return fmt.Sprintf("%s is owned by %s", what, describeUID(o.UID))
		case o.Mode&fs.ModeSymlink == 0 && o.Mode&0o002 != 0 && !(o.Mode.IsDir() && o.Mode&fs.ModeSticky != 0):
			return what + " is writable by every user"
		}
		return ""
	}
	if r := check(entry, "it"); r != "" {
		return r
	}
	if real, err := filepath.EvalSymlinks(entry); err == nil && real != entry {
		if r := check(real, "the file it links to ("+real+")"); r != "" {
			return r
		}
	}
	return check(filepath.Dir(entry), "its directory")
}

// describeUID names a uid as "uid 1001 (alice)", or "uid 1001" when no account has it.
func describeUID(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// GitTopLevel walks up from dir to the nearest directory holding .git (a directory, or the
// file of a worktree or submodule), without running git.
func GitTopLevel(dir string) (string, bool) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d, true
		}
		if d == filepath.Dir(d) {
			return "", false
		}
	}
}

// canonical cleans the absolute path p and resolves symlinks through its deepest existing
// ancestor, so a path that does not exist yet still gets its real parent.
func canonical(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for dir := p; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		if dir == filepath.Dir(dir) {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}
