package protect

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// gitConfig holds the values of the keys that send git somewhere else for code or config.
type gitConfig struct {
	hooksPaths []string // core.hooksPath
	worktrees  []string // core.worktree
	includes   []string // include.path, includeIf.<condition>.path
	// worktreeConfig (extensions.worktreeConfig) makes git read config.worktree as well.
	worktreeConfig bool
}

// parseGitConfig scans git's INI syntax well enough to find gitConfig's keys: sections
// ([core], [includeIf "gitdir:x"], [a.b]), key = value on the header's line too, quotes,
// escapes, comments and backslash-newline continuations. Every value of a key is kept,
// whatever condition an includeIf has, so the caller can protect them all.
func parseGitConfig(data []byte) gitConfig {
	var out gitConfig
	s := string(data)
	section, sub := "", false
	i := 0
	skipLine := func() {
		for i < len(s) && s[i] != '\n' {
			i++
		}
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case c == '#' || c == ';':
			skipLine()
		case c == '[':
			end := headerEnd(s, i+1)
			if end < 0 {
				return out
			}
			header := strings.TrimSpace(s[i+1 : end])
			i = end + 1
			var name string
			if sp := strings.IndexAny(header, " \t"); sp >= 0 {
				name, sub = header[:sp], true // [section "subsection"]
			} else {
				name, _, sub = strings.Cut(header, ".") // [section] or the old [section.subsection]
			}
			section = strings.ToLower(name)
		case isAlpha(c):
			start := i
			for i < len(s) && (isAlpha(s[i]) || s[i] >= '0' && s[i] <= '9' || s[i] == '-') {
				i++
			}
			key := strings.ToLower(s[start:i])
			for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
				i++
			}
			value, valued := "", false
			switch {
			case i < len(s) && s[i] == '=':
				value, i = parseValue(s, i+1)
				valued = true
			case i < len(s) && !strings.ContainsRune("\r\n#;", rune(s[i])):
				skipLine() // garbage
				continue
			}
			switch {
			case section == "extensions" && !sub && key == "worktreeconfig":
				out.worktreeConfig = !valued || isTrue(value)
			case section == "core" && !sub && key == "hookspath":
				out.hooksPaths = append(out.hooksPaths, value)
			case section == "core" && !sub && key == "worktree":
				out.worktrees = append(out.worktrees, value)
			case (section == "include" || section == "includeif") && key == "path":
				out.includes = append(out.includes, value)
			}
		default:
			skipLine()
		}
	}
	return out
}

// headerEnd returns the index of the ] closing a section header whose text starts at i, past
// any ] inside its quoted subsection, or -1.
func headerEnd(s string, i int) int {
	quoted := false
	for ; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == ']' && !quoted:
			return i
		case s[i] == '\n':
			return -1
		}
	}
	return -1
}

// parseValue reads a value starting at i (after the =) and returns it with the index after it.
func parseValue(s string, i int) (string, int) {
	var b strings.Builder
	quoted, keep := false, 0 // keep: the length without unquoted trailing blanks
	for i < len(s) {
		c := s[i]
		i++
		switch {
		case c == '\n' && !quoted:
			return b.String()[:keep], i
		case c == '\\' && i < len(s):
			e := s[i]
			i++
			switch e {
			case '\n':
				continue
			case 'n':
				e = '\n'
			case 't':
				e = '\t'
			case 'b':
				e = '\b'
			}
			b.WriteByte(e)
			keep = b.Len()
		case c == '"':
			quoted = !quoted
		case (c == '#' || c == ';') && !quoted:
			for i < len(s) && s[i] != '\n' {
				i++
			}
			return b.String()[:keep], i
		case (c == ' ' || c == '\t' || c == '\r') && !quoted:
			if b.Len() > 0 {
				b.WriteByte(c)
			}
		default:
			b.WriteByte(c)
			keep = b.Len()
		}
	}
	return b.String()[:keep], i
}

// isTrue reads a git boolean.
func isTrue(v string) bool {
	switch strings.ToLower(v) {
	case "true", "yes", "on":
		return true
	}
	n, err := strconv.Atoi(v)
	return err == nil && n != 0
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// readConfig reads and parses a git config of the project; a missing or unreadable one (git
// cannot read it either) has nothing in it.
func (f *finder) readConfig(rel string) (gitConfig, error) {
	fi, err := os.Lstat(f.abs(rel))
	if err != nil || !fi.Mode().IsRegular() {
		return gitConfig{}, nil
	}
	data, err := readBounded(f.abs(rel))
	switch {
	case errors.Is(err, errTooLarge):
		return gitConfig{}, errs.Failure(fmt.Errorf("protected paths: %s is larger than %d bytes, so sbx cannot check where it sends git", rel, MaxConfigSize),
			"shrink it, or use --workspace ro or none")
	case errors.Is(err, fs.ErrPermission):
		return gitConfig{}, nil
	case err != nil:
		return gitConfig{}, errs.Failure(fmt.Errorf("protected paths: reading %s: %w", f.abs(rel), err), "")
	}
	return parseGitConfig(data), nil
}

// coreWorktree returns a submodule git directory's worktree (core.worktree, relative to it),
// where its relative core.hooksPath starts; ok is false when it is unset or outside.
func (f *finder) coreWorktree(gitdir string) (string, bool, error) {
	cfg, err := f.readConfig(gitdir + "/config")
	if err != nil || len(cfg.worktrees) == 0 {
		return "", false, err
	}
	wt, ok := f.inside(cfg.worktrees[len(cfg.worktrees)-1], gitdir)
	return wt, ok, nil
}

// followConfig protects what g's config files (and those they include, in turn) send git to
// inside the project: hook directories and more config. Such a path that does not exist is
// refused, since the sandbox could create it and git on the host would obey it.
func (f *finder) followConfig(g gitDir) (worktreeConfig bool, err error) {
	seen := map[string]bool{}
	var follow func(rel string, depth int) error
	follow = func(rel string, depth int) error {
		if depth > maxIncludeDepth || seen[rel] {
			return nil
		}
		seen[rel] = true
		cfg, err := f.readConfig(rel)
		if err != nil {
			return err
		}
		worktreeConfig = worktreeConfig || cfg.worktreeConfig
		for _, v := range cfg.hooksPaths {
			if !g.worktreeOK && !path.IsAbs(v) {
				continue // relative to a worktree sbx cannot tell
			}
			p, ok := f.inside(v, g.worktree)
			if !ok {
				continue
			}
			if p == "" && f.collect {
				p = "."
			} else if p == "" {
				return errs.Failure(fmt.Errorf("protected paths: core.hooksPath in %s is the project root, so every file in it could be a hook", rel),
					"point core.hooksPath at a directory of hooks, or use --workspace ro or none")
			}
			if err := f.mustProtect(p, "core.hooksPath in "+rel, "a directory of hooks that git on the host would run"); err != nil {
				return err
			}
		}
		for _, v := range cfg.includes {
			p, ok := f.inside(v, path.Dir(rel))
			if !ok || p == "" {
				continue
			}
			if err := f.mustProtect(p, "included by "+rel, "a config file that git on the host would read"); err != nil {
				return err
			}
			if err := follow(p, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := follow(g.path+"/config", 0); err != nil {
		return false, err
	}
	// Read as config too when extensions.worktreeConfig is on.
	return worktreeConfig, follow(g.path+"/config.worktree", 0)
}

// mustProtect protects rel, which a git config names; it must exist.
func (f *finder) mustProtect(rel, reason, what string) error {
	found, err := f.protect(rel, reason, "")
	if err != nil || found {
		return err
	}
	return errs.Failure(fmt.Errorf("protected paths: %s names %s, which does not exist; a rw sandbox could create it as %s", reason, rel, what),
		fmt.Sprintf("create %s in the project so sbx can protect it, remove the setting, or use --workspace ro or none", rel))
}
