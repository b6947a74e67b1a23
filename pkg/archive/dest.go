package archive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// A sandbox with a writable mount (a rw workspace, a writable bind) controls every name
// below that directory on the host, and what it leaves there outlives it. So the host
// destination of a copy is resolved under one rule: a symbolic link in a directory a
// sandbox may write to is never followed, since the sandbox may have made it; a link
// anywhere else on the way (~/link/dir, a /home that is a link) is the user's own and is
// resolved once, up front. Below a guarded directory every step is taken from the
// directory before it by descriptor and checked to be the directory that was looked at, so
// a directory swapped for a link mid-copy is caught instead of followed.

// maxLinks bounds the links followed while resolving a destination, as the kernel's ELOOP.
const maxLinks = 40

// LinkError is a symbolic link on the way to a copy's host destination, in a directory a
// sandbox may write to.
type LinkError struct {
	// Source is set when the path is a copy's host source rather than its destination.
	Source bool
	Dst    string // the destination (or source), cleaned
	Link   string // the link's host path
	Target string // what it points to: text a sandbox may have chosen
	Guard  string // the directory a sandbox may write to that holds the link
}

func (e *LinkError) Error() string {
	role := "destination"
	if e.Source {
		role = "source"
	}
	what := fmt.Sprintf("%s %q is a symbolic link", role, e.Dst)
	if filepath.Clean(e.Dst) != e.Link {
		what = fmt.Sprintf("%s %q goes through %q, a symbolic link", role, e.Dst, e.Link)
	}
	return fmt.Sprintf("%s (to %s) inside %q, where a sandbox may write and may have made it; sbx follows no link there",
		what, quoteName(e.Target), e.Guard)
}

// ExitCode is 1: the copy was refused, nothing failed.
func (e *LinkError) ExitCode() int { return errs.CodeError }

// Hint says how to copy there when the link is the user's own.
func (e *LinkError) Hint() string {
	return fmt.Sprintf("if you made that link, name the directory it points to instead; if not, a sandbox did: "+
		"look at what it left in %s before you use it", e.Guard)
}

// CheckSource applies the same rule to a copy's host source: a symbolic link a sandbox may
// have made inside a directory it writes to may point anywhere on the host, and following it
// would hand what it points to to the sandbox. The last element is followed only when
// followLast (cp -L, or a trailing slash); otherwise a link there is copied as a link. Links
// outside guarded directories are the user's and are followed.
func CheckSource(src string, guarded []string, followLast bool) error {
	g := newGuards(guarded)
	parts := splitPath(filepath.Clean(src))
	cur := string(filepath.Separator)
	for i, part := range parts {
		next := filepath.Join(cur, part)
		last := i == len(parts)-1
		fi, err := os.Lstat(next)
		if err != nil {
			return nil // a missing source is reported by the copy itself
		}
		if fi.Mode()&fs.ModeSymlink == 0 || (last && !followLast) {
			cur = next
			continue
		}
		if guard := g.holding(next); guard != "" {
			target, _ := os.Readlink(next)
			return &LinkError{Source: true, Dst: filepath.Clean(src), Link: next, Target: target, Guard: guard}
		}
		real, err := filepath.EvalSymlinks(next)
		if err != nil {
			return nil
		}
		cur = real
	}
	return nil
}

// errChanged reports a directory that was not the same one when sbx opened it as when it
// looked at it: something, such as a sandbox, replaced it meanwhile.
func errChanged(path string) error {
	return errs.New(fmt.Errorf("destination directory %q changed while sbx opened it (replaced, perhaps by a link); nothing was copied there", path),
		errs.CodeError, "make sure no sandbox is changing that directory, and copy again")
}

// hostDir is a host directory held by descriptor: a Root for work inside it, and the
// directory itself for the calls a Root makes only by name (renameat, fchmod), which
// would follow a link swapped in under that name.
type hostDir struct {
	root *os.Root
	file *os.File
	path string // for messages
}

func newHostDir(root *os.Root, path string) (*hostDir, error) {
	f, err := root.Open(".")
	if err != nil {
		root.Close()
		return nil, err
	}
	return &hostDir{root: root, file: f, path: path}, nil
}

// openHostDir opens path by name; fi, if set, is what Lstat said path was, and the opened
// directory must be that one.
func openHostDir(path string, fi fs.FileInfo) (*hostDir, error) {
	r, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	return checkedHostDir(r, path, fi)
}

// child opens the directory name in d, which Lstat found to be fi. A Root follows a link
// it meets (within itself), so the directory opened must be the very one looked at.
func (d *hostDir) child(name string, fi fs.FileInfo) (*hostDir, error) {
	r, err := d.root.OpenRoot(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("destination: %w", err)
		}
		return nil, errChanged(filepath.Join(d.path, name))
	}
	return checkedHostDir(r, filepath.Join(d.path, name), fi)
}

// inChild runs f on the directory name in d, which Lstat found to be fi.
func (d *hostDir) inChild(name string, fi fs.FileInfo, f func(*hostDir) error) error {
	c, err := d.child(name, fi)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

func checkedHostDir(r *os.Root, path string, fi fs.FileInfo) (*hostDir, error) {
	if fi != nil {
		got, err := r.Stat(".")
		if err != nil || !os.SameFile(fi, got) {
			r.Close()
			return nil, errChanged(path)
		}
	}
	return newHostDir(r, path)
}

func (d *hostDir) Close() {
	if d != nil {
		d.file.Close()
		d.root.Close()
	}
}

// guards is the set of directories a sandbox may write to, each in the forms it may be
// met in: as given, and with links resolved.
type guards []string

func newGuards(dirs []string) guards {
	var g guards
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			continue
		}
		g = append(g, filepath.Clean(d))
		if real, err := filepath.EvalSymlinks(d); err == nil && real != filepath.Clean(d) {
			g = append(g, real)
		}
	}
	return g
}

// holding returns the guarded directory at or above p, or "".
func (g guards) holding(p string) string {
	for _, d := range g {
		if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, string(filepath.Separator))+string(filepath.Separator)) {
			return d
		}
	}
	return ""
}

// resolved is a destination path resolved as far as it exists.
type resolved struct {
	dir  *hostDir    // the directory dst is (leaf == "") or is in
	leaf string      // dst's last element when it is not an existing directory
	fi   fs.FileInfo // leaf's Lstat; nil when it does not exist
}

// resolveDst walks the absolute path dst element by element under the rule above.
func resolveDst(dst string, opts ExtractOptions) (resolved, error) {
	g := newGuards(opts.Guarded)
	vol := filepath.VolumeName(dst)
	top := vol + string(filepath.Separator)
	real := top // the symlink-free path walked so far
	pending := splitPath(dst[len(vol):])
	// d is the directory at real while real is guarded, nil elsewhere.
	var d *hostDir
	enter := func(fi fs.FileInfo) (err error) {
		if d == nil && g.holding(real) != "" {
			// The first guarded directory: nothing on the way to it is a sandbox's.
			d, err = openHostDir(real, fi)
		}
		return err
	}
	fail := func(err error) (resolved, error) {
		d.Close()
		return resolved{}, err
	}
	if err := enter(nil); err != nil {
		return fail(fmt.Errorf("destination: %w", err))
	}
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		if c == ".." {
			// Only a link target brings "..": real has no links, so its parent is lexical.
			// The walk starts over so that each step is checked again.
			pending = append(splitPath(filepath.Dir(real)[len(vol):]), pending...)
			real = top
			d.Close()
			d = nil
			if err := enter(nil); err != nil {
				return fail(fmt.Errorf("destination: %w", err))
			}
			continue
		}
		next := filepath.Join(real, c)
		var fi fs.FileInfo
		var err error
		if d != nil {
			fi, err = d.root.Lstat(c)
		} else {
			fi, err = os.Lstat(next)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist) && len(pending) > 0:
			return fail(fmt.Errorf("destination directory %q does not exist", next))
		case errors.Is(err, fs.ErrNotExist):
			return finish(d, real, c, nil)
		case err != nil:
			return fail(fmt.Errorf("destination: %w", err))
		case fi.Mode()&fs.ModeSymlink != 0 && d != nil:
			target, _ := d.root.Readlink(c)
			return fail(&LinkError{Dst: dst, Link: next, Target: target, Guard: g.holding(real)})
		case fi.Mode()&fs.ModeSymlink != 0:
			if links++; links > maxLinks {
				return fail(fmt.Errorf("destination %q: too many levels of symbolic links", dst))
			}
			target, err := os.Readlink(next)
			if err != nil {
				return fail(fmt.Errorf("destination: %w", err))
			}
			if filepath.IsAbs(target) {
				vol = filepath.VolumeName(target)
				top = vol + string(filepath.Separator)
				real = top
				target = target[len(vol):]
				if err := enter(nil); err != nil {
					return fail(fmt.Errorf("destination: %w", err))
				}
			}
			pending = append(splitPath(target), pending...)
		case fi.IsDir():
			if opts.beforeOpen != nil {
				opts.beforeOpen(next)
			}
			if d != nil {
				nd, err := d.child(c, fi)
				d.Close()
				if d = nd; err != nil {
					return resolved{}, err
				}
			}
			real = next
			if err := enter(fi); err != nil {
				return fail(fmt.Errorf("destination: %w", err))
			}
		case len(pending) > 0:
			return fail(fmt.Errorf("destination %q is not a directory", next))
		default:
			return finish(d, real, c, fi)
		}
	}
	return finish(d, real, "", nil)
}

// finish opens the directory at real unless the walk holds it already.
func finish(d *hostDir, real, leaf string, fi fs.FileInfo) (resolved, error) {
	if d == nil {
		var err error
		if d, err = openHostDir(real, nil); err != nil {
			return resolved{}, fmt.Errorf("opening destination directory: %w", err)
		}
	}
	return resolved{dir: d, leaf: leaf, fi: fi}, nil
}

// splitPath splits p into its elements, dropping empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for _, e := range strings.Split(filepath.ToSlash(p), "/") {
		if e != "" && e != "." {
			out = append(out, e)
		}
	}
	return out
}
