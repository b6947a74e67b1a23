package overlay

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-sandbox/sbx/pkg/hostfs"
)

// ApplyOptions say what sbx apply writes.
type ApplyOptions struct {
	// Paths keep only changes at or under one of them; none means all.
	Paths []string
	// ProtectedPaths are the protectedPaths entries; changes they cover are skipped unless
	// IncludeProtected.
	ProtectedPaths   []string
	IncludeProtected bool
	DryRun           bool
	// Umask clears permission bits of files and directories the sandbox made or re-moded.
	Umask uint32
	// AfterEach, when set, is called after each change reaches the project with how many
	// have; the tests of atomicity stop sbx there.
	AfterEach func(n int)
	// Review, when set, is given the change set (Digest) before anything is written; an
	// error from it stops the apply with nothing written. The caller keeps the layers from
	// changing meanwhile (the sandbox stopped), so what is written is what was reviewed.
	Review func(changes []Change, digest string) error
}

// ApplyResult is what sbx apply did; its JSON names are stable.
type ApplyResult struct {
	// Digest is the change set's (Digest), as sbx diff printed it for the same paths.
	Digest    string   `json:"digest"`
	Applied   []Change `json:"applied"`
	Conflicts []Change `json:"conflicts"`
	Skipped   []Change `json:"skipped"` // protected
}

// Apply writes the sandbox's changes onto the project. A change whose path the host changed
// since the sandbox was created is a conflict and left alone, as is a protected one unless
// asked for; the rest are applied. Each file is written to a temporary file in its directory
// and renamed over its path, so it is old or new, never partial; directories are opened one
// component at a time without following a link, so nothing is written through a link, in
// or out of the project. What was applied leaves the upper layer (unless a directory there
// hides the project's, whose entries must stay), so the next diff no longer shows it.
func (l Layers) Apply(o ApplyOptions) (*ApplyResult, error) {
	changes, err := l.Changes(o.ProtectedPaths, o.Paths)
	if err != nil {
		return nil, err
	}
	digest, err := l.Digest(changes)
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox's changes: %w", err)
	}
	if o.Review != nil {
		if err := o.Review(changes, digest); err != nil {
			return nil, err
		}
	}
	res := &ApplyResult{Digest: digest, Applied: []Change{}, Conflicts: []Change{}, Skipped: []Change{}}
	var todo []Change
	for _, c := range changes {
		switch {
		case c.Conflict != "":
			res.Conflicts = append(res.Conflicts, c)
		case c.Protected != "" && !o.IncludeProtected:
			res.Skipped = append(res.Skipped, c)
		default:
			todo = append(todo, c)
		}
	}
	if o.DryRun {
		res.Applied = append(res.Applied, todo...)
		return res, nil
	}
	m, err := readManifest(l)
	if err != nil {
		return nil, err
	}
	a := &applier{l: l, o: o, m: m, res: res}
	if a.up, a.low, err = l.roots(); err != nil {
		return nil, err
	}
	defer unix.Close(a.up)
	defer unix.Close(a.low)
	err = a.run(todo)
	if werr := m.write(l); err == nil && werr != nil {
		err = fmt.Errorf("recording what was applied: %w", werr)
	}
	return res, err
}

type applier struct {
	l       Layers
	o       ApplyOptions
	m       manifest
	res     *ApplyResult
	up, low int
	n       int
}

func (a *applier) done(c Change, paths ...string) {
	for _, p := range paths {
		if p != "" {
			a.m.refresh(a.l, p)
		}
	}
	a.res.Applied = append(a.res.Applied, c)
	a.n++
	if a.o.AfterEach != nil {
		a.o.AfterEach(a.n)
	}
}

func (a *applier) run(todo []Change) error {
	byDepth := func(deepFirst bool) func(x, y Change) int {
		return func(x, y Change) int {
			dx, dy := strings.Count(x.Path, "/"), strings.Count(y.Path, "/")
			if deepFirst {
				dx, dy = dy, dx
			}
			if dx != dy {
				return dx - dy
			}
			return strings.Compare(x.Path, y.Path)
		}
	}
	var files, dirsGone, dirsNew, modes []Change
	for _, c := range todo {
		switch {
		case c.Status == Deleted && c.Kind == KindDir:
			dirsGone = append(dirsGone, c)
		case c.Status == Added && c.Kind == KindDir:
			dirsNew = append(dirsNew, c)
			modes = append(modes, c)
		case c.Status == ModeOnly:
			modes = append(modes, c)
		default:
			files = append(files, c)
		}
	}
	// Files and links that go, then directories, deepest first; then new directories,
	// then files, then modes, deepest first, so a directory made read-only comes last.
	for _, c := range files {
		if c.Status != Deleted {
			continue
		}
		if err := a.unlink(c.Path); err != nil {
			return err
		}
		if err := a.dropWhiteout(c); err != nil {
			return err
		}
		a.done(c, c.Path)
	}
	slices.SortFunc(dirsGone, byDepth(true))
	for _, c := range dirsGone {
		err := inDir(a.low, c.Path, func(d int, base string) error { return unix.Unlinkat(d, base, unix.AT_REMOVEDIR) })
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			c.Conflict = "holds files that were not applied"
			a.res.Conflicts = append(a.res.Conflicts, c)
			continue
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return a.fail(c, err)
		}
		if err := a.dropWhiteout(c); err != nil {
			return err
		}
		a.done(c, c.Path)
	}
	slices.SortFunc(dirsNew, byDepth(false))
	for _, c := range dirsNew {
		err := inDir(a.low, c.Path, func(d int, base string) error {
			err := unix.Mkdirat(d, base, 0o700)
			if err == nil {
				a.chownNew(d, base)
			}
			return err
		})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return a.fail(c, err)
		}
	}
	for _, c := range files {
		if c.Status == Deleted {
			continue
		}
		if err := a.write(c); err != nil {
			return a.fail(c, err)
		}
		if c.Status == Renamed {
			if err := a.unlink(c.OldPath); err != nil {
				return err
			}
			if c.whiteout {
				if err := removeUpper(a.up, c.OldPath); err != nil {
					return err
				}
			}
		}
		if err := a.dropUpper(c); err != nil {
			return err
		}
		a.done(c, c.Path, c.OldPath)
	}
	slices.SortFunc(modes, byDepth(true))
	for _, c := range modes {
		err := inDir(a.low, c.Path, func(d int, base string) error { return chmodAt(d, base, c.newPerm&0o777&^a.o.Umask) })
		if err != nil {
			return a.fail(c, err)
		}
		if c.Kind != KindDir {
			if err := a.dropUpper(c); err != nil {
				return err
			}
		}
		a.done(c, c.Path)
	}
	return nil
}

func (a *applier) fail(c Change, err error) error {
	return fmt.Errorf("applying %s: %w", Quote(c.Path), err)
}

// unlink removes the file or link rel from the project.
func (a *applier) unlink(rel string) error {
	err := inDir(a.low, rel, func(d int, base string) error { return unix.Unlinkat(d, base, 0) })
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("applying %s: %w", Quote(rel), err)
	}
	return nil
}

// write puts the new side of c at c.Path in the project: a temporary file or link beside it,
// renamed over it.
func (a *applier) write(c Change) error {
	dir, base := split(c.Path)
	d, err := openDir(a.low, dir)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	tmp := tempName()
	if c.Kind == KindSymlink {
		target, err := readSide(a.up, true, c.Path, KindSymlink, 4096)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(string(target), d, tmp); err != nil {
			return err
		}
	} else if err := a.copyFile(c, d, tmp); err != nil {
		_ = unix.Unlinkat(d, tmp, 0)
		return err
	}
	if err := unix.Renameat(d, tmp, d, base); err != nil {
		_ = unix.Unlinkat(d, tmp, 0)
		return err
	}
	return nil
}

func (a *applier) copyFile(c Change, d int, tmp string) error {
	src, err := openIn(a.up, true, c.Path)
	if err != nil {
		return err
	}
	defer src.Close()
	fd, err := unix.Openat(d, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(fd), tmp)
	defer dst.Close()
	if err := copySparse(dst, src); err != nil {
		return err
	}
	mode := c.newPerm & 0o777 &^ a.o.Umask
	if c.Status == Modified && c.newPerm == c.oldPerm {
		mode = c.oldPerm & 0o777
	}
	if err := dst.Chmod(os.FileMode(mode)); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		// Root writes for the project's owner: the file keeps its owner, a new one takes its
		// directory's.
		var st unix.Stat_t
		_, base := split(c.Path)
		if c.Status == Added || c.Status == Renamed {
			base = "."
		}
		if unix.Fstatat(d, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			_ = dst.Chown(int(st.Uid), int(st.Gid))
		}
	}
	return dst.Sync()
}

// chownNew gives a directory root made the owner of the one it is in.
func (a *applier) chownNew(d int, name string) {
	if os.Geteuid() != 0 {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(d, &st) == nil {
		_ = unix.Fchownat(d, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
	}
}

// dropUpper removes c's new side from the upper layer once the project has it. Under a
// directory that hides the project's (replacedBy) it stays, or the project's other entries
// would show through.
func (a *applier) dropUpper(c Change) error {
	if c.replacedBy != "" {
		return nil
	}
	return removeUpper(a.up, c.Path)
}

// dropWhiteout removes the whiteout of a deletion the project now has too; a deletion by a
// directory that hides the project's has none of its own.
func (a *applier) dropWhiteout(c Change) error {
	if !c.whiteout {
		return nil
	}
	return removeUpper(a.up, c.Path)
}

// removeUpper removes rel, with what is under it, from the upper layer up. A directory the
// sandbox made unwritable (0500) is made writable for that and given its mode back.
func removeUpper(up int, rel string) error {
	dir, base := split(rel)
	d, err := openDir(up, dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s from the upper layer: %w", Quote(rel), err)
	}
	defer unix.Close(d)
	var st unix.Stat_t
	if err := unix.Fstat(d, &st); err != nil {
		return err
	}
	if st.Mode&0o300 != 0o300 {
		if err := unix.Fchmod(d, perm(st)|0o300); err != nil {
			return fmt.Errorf("removing %s from the upper layer: %w", Quote(rel), err)
		}
		defer unix.Fchmod(d, perm(st))
	}
	if err := hostfs.RemoveAt(d, base, rel); err != nil {
		return fmt.Errorf("removing %s from the upper layer: %w", Quote(rel), err)
	}
	return nil
}

func tempName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return ".sbx-apply-" + hex.EncodeToString(b)
}

// Discard drops the sandbox's changes at or under paths (all of them when none) from the
// upper layer, so the workspace shows the project again there. A change inside a directory
// the sandbox deleted or replaced whole can only go with that directory: it is refused,
// naming the directory, unless a path covers the directory too. It returns what it dropped.
func (l Layers) Discard(paths []string) ([]Change, error) {
	if err := l.notCarried("discard"); err != nil {
		return nil, err
	}
	changes, err := l.Changes(nil, paths)
	if err != nil {
		return nil, err
	}
	up, err := openPath(l.Upper())
	if err != nil {
		return nil, err
	}
	defer unix.Close(up)
	covered := func(p string) bool { return selected(Change{Path: p}, paths) }
	var drop []string
	var chmods []Change
	var refused []string
	for _, c := range changes {
		switch {
		case c.Status == ModeOnly && c.Kind == KindDir && c.replacedBy == "":
			chmods = append(chmods, c)
		case c.Status == Added:
			drop = append(drop, c.Path)
		case c.replacedBy != "" && !(c.Status == Deleted && c.whiteout):
			if covered(c.replacedBy) {
				drop = append(drop, c.replacedBy)
			} else {
				refused = append(refused, fmt.Sprintf("%s lies in %s, which the sandbox deleted or replaced whole", Quote(c.Path), Quote(c.replacedBy)))
			}
		case c.Status == Renamed:
			if c.oldReplacedBy != "" && !c.whiteout {
				refused = append(refused, fmt.Sprintf("%s came from %s, in %s, which the sandbox replaced whole", Quote(c.Path), Quote(c.OldPath), Quote(c.oldReplacedBy)))
				continue
			}
			drop = append(drop, c.Path, c.OldPath)
		default:
			drop = append(drop, c.Path)
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("nothing discarded: %s\nhint: discard the directory as a whole (sbx discard DIR), or apply it", strings.Join(refused, "; "))
	}
	slices.Sort(drop)
	drop = slices.Compact(drop)
	var last string
	for _, p := range drop {
		if last != "" && strings.HasPrefix(p, last+"/") {
			continue
		}
		if err := removeUpper(up, p); err != nil {
			return nil, err
		}
		last = p
	}
	for _, c := range chmods {
		if err := inDir(up, c.Path, func(d int, base string) error { return chmodAt(d, base, c.oldPerm) }); err != nil {
			return nil, fmt.Errorf("discarding %s: %w", Quote(c.Path), err)
		}
	}
	return changes, nil
}
