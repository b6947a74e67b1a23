package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ValidName checks a sandbox name: [a-z0-9][a-z0-9_.-]{0,62}.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
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

// FindProjectRoot returns the project root and how it was found: projectDir (--project) when
// given, else the nearest ancestor of wd holding .sbx.yaml, else the git top-level, else wd.
// The result is absolute and free of symlinks, so one project always gets one default name.
func FindProjectRoot(wd, projectDir string, gitRoot func(string) (string, bool)) (string, string, error) {
	wd = canonical(wd)
	if projectDir != "" {
		if !filepath.IsAbs(projectDir) {
			projectDir = filepath.Join(wd, projectDir)
		}
		fi, err := os.Stat(projectDir)
		if err != nil {
			return "", "", fmt.Errorf("--project %s: %w", projectDir, err)
		}
		if !fi.IsDir() {
			return "", "", fmt.Errorf("--project %s: not a directory", projectDir)
		}
		return canonical(projectDir), RootFromFlag, nil
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(filepath.Join(dir, ProjectFileName)); err == nil && fi.Mode().IsRegular() {
			return dir, RootFromFile, nil
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	if gitRoot == nil {
		gitRoot = GitTopLevel
	}
	if top, ok := gitRoot(wd); ok {
		return canonical(top), RootFromGit, nil
	}
	return wd, RootFromWorkDir, nil
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
