package overlay

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// A carried workspace is the project copied into the sandbox's own volume, for an engine
// that cannot see this machine's files. Its layers' directory holds the manifest of what was
// carried, with each file's digest, and, while sbx diff or apply runs, upper/: the
// sandbox's whole workspace fetched back (Layers.Carried). Every directory there replaces
// the project's, and what the sandbox still has as it was carried is no change of its, so
// diff, apply and their conflicts work as for an overlay.

// Exclude matches project paths against .gitignore-style patterns: "name" at any depth,
// "dir/name" or "/name" from the root, "*", "?" and "**", and a trailing "/" for directories
// only. There is no "!": a pattern can only leave more out.
type Exclude struct {
	res []excludeRE
	// Only, when set, keeps only the paths it says yes to: sbx sync sends what changed.
	Only func(rel string) bool
}

type excludeRE struct {
	re      *regexp.Regexp
	dirOnly bool
}

// NewExclude compiles patterns; the config's validation has refused the ones it cannot take.
func NewExclude(patterns []string) (*Exclude, error) {
	e := &Exclude{}
	for _, p := range patterns {
		if err := config.ValidWorkspaceExclude(p); err != nil {
			return nil, fmt.Errorf("%q: %w", p, err)
		}
		dirOnly := strings.HasSuffix(p, "/")
		p = strings.TrimSuffix(p, "/")
		anchored := strings.Contains(p, "/")
		p = strings.TrimPrefix(p, "/")
		var b strings.Builder
		if !anchored {
			b.WriteString("(?:^|/)")
		} else {
			b.WriteString("^")
		}
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				b.WriteString("(?:.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "/**") && i+3 == len(p):
				b.WriteString("/.*")
				i += 2
			case p[i] == '*':
				b.WriteString("[^/]*")
			case p[i] == '?':
				b.WriteString("[^/]")
			default:
				b.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		b.WriteString("$")
		re, err := regexp.Compile(b.String())
		if err != nil {
			return nil, fmt.Errorf("workspaceExclude %q: %w", p, err)
		}
		e.res = append(e.res, excludeRE{re: re, dirOnly: dirOnly})
	}
	return e, nil
}

// Match says whether the project path rel (slash-separated), a directory when dir, is left out.
func (e *Exclude) Match(rel string, dir bool) bool {
	for _, r := range e.res {
		if (!r.dirOnly || dir) && r.re.MatchString(rel) {
			return true
		}
	}
	return false
}

// walk calls fn for each path under root (p, and rel slash-separated) but root itself and
// what e leaves out, without following links.
func (e *Exclude) walk(root string, fn func(p, rel string, d fs.DirEntry) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if e.Match(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(p, rel, d)
	})
}

// Carried is what Carry sent, to be recorded once the sandbox has it all.
type Carried struct {
	l       Layers
	entries manifest
	Files   int
	Bytes   int64
}

// Carry writes the project as a tar stream to w, without what exclude leaves out, and
// returns what it sent. Only directories, regular files and symlinks go; nothing is followed.
func Carry(l Layers, exclude *Exclude, w io.Writer) (*Carried, error) {
	c := &Carried{l: l, entries: manifest{}}
	tw := tar.NewWriter(w)
	err := exclude.walk(l.Lower, func(p, rel string, d fs.DirEntry) error {
		if exclude.Only != nil && !exclude.Only(rel) {
			return nil
		}
		if len(c.entries) >= maxManifest {
			return errs.Failure(fmt.Errorf("the project holds more than %d files and directories", maxManifest), "leave some out with workspaceExclude")
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := entryOf(rel, fi)
		hdr := &tar.Header{Name: rel, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case fi.Mode().Type() == fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			e.Hash = digest(strings.NewReader(target))
		case fi.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		default:
			return nil // a FIFO, socket or device is no project content
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			if e.Hash, err = sendFile(tw, p, fi.Size()); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			c.Files++
			c.Bytes += fi.Size()
		}
		c.entries[rel] = e
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("carrying the project: %w", err)
	}
	return c, nil
}

// sendFile writes the size bytes of host file p to tw and returns their digest; a file that
// changed size meanwhile fails the carry rather than send a torn copy.
func sendFile(tw *tar.Writer, p string, size int64) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(f, size))
	if err == nil && n != size {
		err = errors.New("the file shrank while it was carried")
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

func digest(r io.Reader) string {
	h := sha256.New()
	_, _ = io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil))
}

// Save records what was carried as l's manifest, replacing any earlier one.
func (c *Carried) Save() error {
	if err := os.MkdirAll(c.l.Dir, 0o700); err != nil {
		return err
	}
	return c.entries.write(c.l)
}

// untouched says whether change c is the sandbox leaving a carried path as it was carried
// (the host changed since, or never sent it): the sandbox's side equals the manifest's.
func (s *scan) untouched(m manifest, c Change) bool {
	if c.Status == Deleted {
		_, carried := m[c.Path]
		return !carried
	}
	e, carried := m[c.Path]
	if !carried || uint32(fs.FileMode(e.Mode).Perm()) != c.newPerm&0o777 {
		return false
	}
	switch c.Kind {
	case KindDir:
		return fs.FileMode(e.Mode).IsDir()
	case KindSymlink:
		dir, base := split(c.Path)
		d, err := openDir(s.up, dir)
		if err != nil {
			return false
		}
		defer unix.Close(d)
		target, err := readLink(d, base)
		return err == nil && e.Hash == digest(strings.NewReader(target))
	}
	f, err := openIn(s.up, true, c.Path)
	if err != nil {
		return false
	}
	defer f.Close()
	return e.Hash != "" && e.Hash == digest(f)
}

// notCarried refuses what only an overlay's upper layer can do (what names it).
func (l Layers) notCarried(what string) error {
	if !l.Carried {
		return nil
	}
	return errs.Failure(fmt.Errorf("%s work on an overlay workspace, and this one is carried (a copy in the sandbox's volume)", what),
		"change the files in the sandbox instead")
}

// HostChanges lists what the host changed in a carried project since the manifest was
// written (at create, or by the last sync): paths to send again, and paths it removed.
// exclude leaves out what it left out at create.
func (l Layers) HostChanges(exclude *Exclude) (send, gone []string, err error) {
	m, err := readManifest(l)
	if err != nil {
		return nil, nil, err
	}
	err = exclude.walk(l.Lower, func(_, rel string, d fs.DirEntry) error {
		if t := d.Type(); t.IsRegular() || t.IsDir() || t == fs.ModeSymlink {
			if m.hostChange(l.Lower, rel) != "" {
				send = append(send, rel)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the project: %w", err)
	}
	for rel := range m {
		if _, err := os.Lstat(filepath.Join(l.Lower, filepath.FromSlash(rel))); errors.Is(err, fs.ErrNotExist) {
			gone = append(gone, rel)
		}
	}
	slices.Sort(gone)
	return send, gone, nil
}

// Synced records what a sync sent (c) and removed (gone) in l's manifest.
func (l Layers) Synced(c *Carried, gone []string) error {
	m, err := readManifest(l)
	if err != nil {
		return err
	}
	for _, rel := range gone {
		delete(m, rel)
	}
	if c != nil {
		maps.Copy(m, c.entries)
	}
	return m.write(l)
}
