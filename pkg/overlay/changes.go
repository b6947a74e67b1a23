package overlay

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-sandbox/sbx/pkg/protect"
)

// Kinds of what changed.
const (
	KindFile    = "file"
	KindDir     = "dir"
	KindSymlink = "symlink"
)

// Statuses of a change.
const (
	Added    = "added"
	Modified = "modified"
	Deleted  = "deleted"
	Renamed  = "renamed"
	ModeOnly = "mode"
)

// Change is one difference between the workspace the sandbox sees and the project on the
// host. Its JSON names are stable (sbx diff --json).
type Change struct {
	Path    string `json:"path"`
	OldPath string `json:"oldPath,omitempty"`
	Status  string `json:"status"`
	Kind    string `json:"kind"`
	// OldMode and NewMode are the permission bits, in octal, on each side that has one.
	OldMode string `json:"oldMode,omitempty"`
	NewMode string `json:"newMode,omitempty"`
	Size    int64  `json:"size"`
	Binary  bool   `json:"binary,omitempty"`
	// Protected says why apply skips the change unless told (protect.Guard): the
	// protectedPaths entry that covers the path, or another of the guard's reasons.
	Protected string `json:"protected,omitempty"`
	// Target is the target of a link the sandbox made or changed.
	Target string `json:"target,omitempty"`
	// Conflict says how the host changed the path since the sandbox was created: apply
	// leaves it alone.
	Conflict string `json:"conflict,omitempty"`

	oldPerm, newPerm uint32
	// whiteout: the upper layer marks OldPath (or Path when deleted) deleted.
	whiteout bool
	// replacedBy is the nearest upper directory above (or at) Path that hides the project's
	// directory of the same name: its upper entries stay after apply, or the project's
	// other entries would show through.
	replacedBy string
	// oldReplacedBy is replacedBy for OldPath of a rename.
	oldReplacedBy string
}

// source is the path whose old side the change has, "" for an addition.
func (c *Change) oldSide() string {
	switch c.Status {
	case Added:
		return ""
	case Renamed:
		return c.OldPath
	}
	return c.Path
}

// Changes compares the upper layer with the project as it is now and returns the changes in
// path order, each marked protected (by protect.Guard, with protectedPaths) and conflicting
// (by the manifest). Paths, when given, keep only changes at or under one of them.
func (l Layers) Changes(protectedPaths, paths []string) ([]Change, error) {
	guard, err := protect.NewGuard(l.Lower, protectedPaths, protect.Options{})
	if err != nil {
		return nil, err
	}
	up, low, err := l.roots()
	if err != nil {
		return nil, err
	}
	defer unix.Close(up)
	defer unix.Close(low)
	m, err := readManifest(l)
	if err != nil {
		return nil, err
	}
	s := &scan{up: up, low: low, full: l.Carried}
	if err := s.dir("", l.Carried, ""); err != nil {
		return nil, fmt.Errorf("reading the sandbox's changes: %w", err)
	}
	if l.Carried {
		kept := s.out[:0]
		for _, c := range s.out {
			if !s.untouched(m, c) {
				kept = append(kept, c)
			}
		}
		s.out = kept
	}
	if err := s.renames(); err != nil {
		return nil, fmt.Errorf("reading the sandbox's changes: %w", err)
	}
	guard.IsGitDir = s.gitDirs()
	// The scan's descriptors stay open for binary below.
	var out []Change
	for _, c := range s.out {
		if !selected(c, paths) {
			continue
		}
		if c.Kind == KindSymlink && c.Status != Deleted {
			if err := inDir(s.up, c.Path, func(d int, base string) (err error) { c.Target, err = readLink(d, base); return err }); err != nil {
				return nil, fmt.Errorf("reading the sandbox's changes: %s: %w", c.Path, err)
			}
		}
		for _, p := range []string{c.Path, c.OldPath} {
			if p == "" {
				continue
			}
			why, ok := guard.Covers(p)
			if p == c.Path && c.Target != "" {
				why, ok = guard.CoversLink(p, c.Target)
			}
			if ok && c.Protected == "" {
				c.Protected = why
			}
			if why := m.hostChange(l.Lower, p); why != "" && c.Conflict == "" && (c.Kind != KindDir || c.Status != Added) {
				c.Conflict = why
			}
		}
		if c.oldPerm != 0 || c.oldSide() != "" {
			c.OldMode = fmt.Sprintf("%04o", c.oldPerm)
		}
		if c.Status != Deleted {
			c.NewMode = fmt.Sprintf("%04o", c.newPerm)
		}
		if c.Kind == KindFile {
			if c.Binary, err = s.binary(c); err != nil {
				return nil, err
			}
		}
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// gitDirs returns protect.Guard's IsGitDir for the project as the changes would leave it: a
// directory with a HEAD and objects and refs (a link to one counts: git follows them), or
// with a HEAD and a commondir, is one, as git's own test for a repository goes.
func (s *scan) gitDirs() func(dir string) bool {
	seen := map[string]bool{}
	return func(dir string) bool {
		if is, ok := seen[dir]; ok {
			return is
		}
		some := func(name string, kinds ...string) bool { return slices.Contains(kinds, s.mergedKind(join(dir, name))) }
		is := some("HEAD", KindFile, KindSymlink) &&
			(some("objects", KindDir, KindSymlink) && some("refs", KindDir, KindSymlink) || some("commondir", KindFile))
		seen[dir] = is
		return is
	}
}

// mergedKind is the kind of the project path rel as the sandbox sees it: the upper layer's
// entry, unless it is missing there, then the project's; "" when neither has it.
func (s *scan) mergedKind(rel string) string {
	dir, base := split(rel)
	for _, root := range []int{s.up, s.low} {
		d, err := openDir(root, dir)
		if err != nil {
			continue
		}
		st, ok, _ := lstatAt(d, base)
		unix.Close(d)
		if ok && root == s.up && isWhiteout(st) {
			return ""
		}
		if ok {
			return kindOf(st)
		}
	}
	return ""
}

func selected(c Change, paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, p := range paths {
		p = strings.Trim(p, "/")
		for _, q := range []string{c.Path, c.OldPath} {
			if q != "" && (p == "" || p == "." || q == p || strings.HasPrefix(q, p+"/")) {
				return true
			}
		}
	}
	return false
}

type scan struct {
	up, low int
	out     []Change
	// full: the upper layer is a whole workspace (a carried one), every directory of which
	// replaces the project's.
	full bool
}

// dir compares the upper directory rel with the project's. replaced: the upper directory
// hides the project's, so project entries it lacks are deleted; replacedBy names the upper
// directory that does.
func (s *scan) dir(rel string, replaced bool, replacedBy string) error {
	ud, err := openDir(s.up, rel)
	if err != nil {
		return err
	}
	defer unix.Close(ud)
	ld, err := openDir(s.low, rel)
	if err != nil {
		ld = -1
	} else {
		defer unix.Close(ld)
	}
	ns, err := names(ud)
	if err != nil {
		return err
	}
	for _, name := range ns {
		p := join(rel, name)
		ust, _, err := lstatAt(ud, name)
		if err != nil {
			continue // gone since the listing
		}
		var lst unix.Stat_t
		lok := false
		if ld >= 0 {
			if lst, lok, err = lstatAt(ld, name); err != nil {
				return err
			}
		}
		lkind := ""
		if lok {
			lkind = kindOf(lst)
		}
		switch {
		case isWhiteout(ust):
			if lok {
				if err := s.deleted(ld, rel, name, lst, true, replacedBy); err != nil {
					return err
				}
			}
		case kindOf(ust) == KindDir:
			opaque := s.full || isOpaque(ud, name)
			if lkind == KindDir && !opaque {
				if perm(ust) != perm(lst) {
					s.out = append(s.out, Change{Path: p, Status: ModeOnly, Kind: KindDir, oldPerm: perm(lst), newPerm: perm(ust), replacedBy: replacedBy})
				}
				if err := s.dir(p, false, replacedBy); err != nil {
					return err
				}
				continue
			}
			if lok && lkind != KindDir {
				if err := s.deleted(ld, rel, name, lst, false, replacedBy); err != nil {
					return err
				}
			}
			if lkind != KindDir {
				s.out = append(s.out, Change{Path: p, Status: Added, Kind: KindDir, newPerm: perm(ust), replacedBy: replacedBy})
			} else if perm(ust) != perm(lst) {
				s.out = append(s.out, Change{Path: p, Status: ModeOnly, Kind: KindDir, oldPerm: perm(lst), newPerm: perm(ust), replacedBy: replacedBy})
			}
			by := replacedBy
			if lok && by == "" {
				by = p
			}
			if err := s.dir(p, lkind == KindDir, by); err != nil {
				return err
			}
		case kindOf(ust) == KindFile || kindOf(ust) == KindSymlink:
			k := kindOf(ust)
			if lok && lkind != k {
				if err := s.deleted(ld, rel, name, lst, false, replacedBy); err != nil {
					return err
				}
				lok = false
			}
			c := Change{Path: p, Kind: k, Size: ust.Size, newPerm: perm(ust), replacedBy: replacedBy}
			if !lok {
				c.Status = Added
				s.out = append(s.out, c)
				continue
			}
			c.oldPerm = perm(lst)
			same, err := sameContent(ud, ld, name, k, ust, lst)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			switch {
			case !same:
				c.Status = Modified
			case k == KindFile && c.oldPerm != c.newPerm:
				c.Status = ModeOnly
			default:
				continue
			}
			s.out = append(s.out, c)
		}
		// Anything else (a FIFO, a socket, a device) cannot be put in a project by a diff.
	}
	if !replaced || ld < 0 {
		return nil
	}
	lns, err := names(ld)
	if err != nil {
		return err
	}
	for _, name := range lns {
		if _, in := slices.BinarySearch(ns, name); in {
			continue
		}
		lst, ok, err := lstatAt(ld, name)
		if err != nil || !ok {
			continue
		}
		if err := s.deleted(ld, rel, name, lst, false, replacedBy); err != nil {
			return err
		}
	}
	return nil
}

// deleted records the project entry name in dir rel (descriptor ld) and, for a directory,
// everything under it as deleted.
func (s *scan) deleted(ld int, rel, name string, st unix.Stat_t, whiteout bool, replacedBy string) error {
	p := join(rel, name)
	k := kindOf(st)
	if k == "" {
		return nil
	}
	if k == KindDir {
		sub, err := openDir(ld, name)
		if err != nil {
			return err
		}
		defer unix.Close(sub)
		ns, err := names(sub)
		if err != nil {
			return err
		}
		// What is under a deleted directory goes with it, and only with it.
		by := replacedBy
		if by == "" {
			by = p
		}
		for _, n := range ns {
			cst, ok, err := lstatAt(sub, n)
			if err != nil || !ok {
				continue
			}
			if err := s.deleted(sub, p, n, cst, false, by); err != nil {
				return err
			}
		}
	}
	s.out = append(s.out, Change{Path: p, Status: Deleted, Kind: k, Size: st.Size, oldPerm: perm(st), whiteout: whiteout, replacedBy: replacedBy})
	return nil
}

// textLimit is the largest file shown as text; larger ones are shown as binary.
const textLimit = 4 << 20

// binary says whether either side of c is shown as binary: larger than textLimit, or with a
// NUL byte in its first 8000 bytes, as git decides.
func (s *scan) binary(c Change) (bool, error) {
	sides := []struct {
		root  int
		upper bool
		rel   string
	}{{s.low, false, c.oldSide()}}
	if c.Status != Deleted {
		sides = append(sides, struct {
			root  int
			upper bool
			rel   string
		}{s.up, true, c.Path})
	}
	for _, side := range sides {
		if side.rel == "" {
			continue
		}
		f, err := openIn(side.root, side.upper, side.rel)
		if err != nil {
			return false, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return false, err
		}
		buf := make([]byte, 8000)
		n, _ := io.ReadFull(f, buf)
		f.Close()
		if fi.Size() > textLimit || bytes.IndexByte(buf[:n], 0) >= 0 {
			return true, nil
		}
	}
	return false, nil
}

// openIn opens the regular file rel under root, following no link on the way; upper says
// root is the upper layer (openFile).
func openIn(root int, upper bool, rel string) (*os.File, error) {
	dir, base := split(rel)
	d, err := openDir(root, dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(d)
	return openFile(d, base, upper)
}

// perm is the permission bits of st (Mode is a uint16 on some systems).
func perm(st unix.Stat_t) uint32 { return uint32(st.Mode) & 0o7777 }

// sameContent compares the upper and project entries name, of kind k, by content.
func sameContent(ud, ld int, name, k string, ust, lst unix.Stat_t) (bool, error) {
	if k == KindSymlink {
		a, err := readLink(ud, name)
		if err != nil {
			return false, err
		}
		b, err := readLink(ld, name)
		return a == b, err
	}
	if ust.Size != lst.Size {
		return false, nil
	}
	a, err := openFile(ud, name, true)
	if err != nil {
		return false, err
	}
	defer a.Close()
	b, err := openFile(ld, name, false)
	if err != nil {
		return false, err
	}
	defer b.Close()
	return sameReaders(io.LimitReader(a, ust.Size+1), io.LimitReader(b, lst.Size+1))
}

func sameReaders(a, b io.Reader) (bool, error) {
	ba, bb := make([]byte, 64*1024), make([]byte, 64*1024)
	for {
		na, erra := io.ReadFull(a, ba)
		nb, errb := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if erra != nil || errb != nil {
			if (erra == io.EOF || erra == io.ErrUnexpectedEOF) && (errb == io.EOF || errb == io.ErrUnexpectedEOF) {
				return true, nil
			}
			if erra != nil && erra != io.EOF && erra != io.ErrUnexpectedEOF {
				return false, erra
			}
			return false, errb
		}
	}
}

// renames pairs each deleted file with an added file of the same content, in path order.
func (s *scan) renames() error {
	added := map[int64][]int{}
	for i, c := range s.out {
		if c.Status == Added && c.Kind == KindFile {
			added[c.Size] = append(added[c.Size], i)
		}
	}
	if len(added) == 0 {
		return nil
	}
	sums := map[int]string{}
	sum := func(root int, upper bool, rel string) (string, error) {
		f, err := openIn(root, upper, rel)
		if err != nil {
			return "", err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return "", err
		}
		return string(h.Sum(nil)), nil
	}
	drop := map[int]bool{}
	for i := range s.out {
		c := &s.out[i]
		if c.Status != Deleted || c.Kind != KindFile || len(added[c.Size]) == 0 {
			continue
		}
		old, err := sum(s.low, false, c.Path)
		if err != nil {
			continue
		}
		for k, j := range added[c.Size] {
			if _, ok := sums[j]; !ok {
				if sums[j], err = sum(s.up, true, s.out[j].Path); err != nil {
					return err
				}
			}
			if sums[j] != old {
				continue
			}
			n := &s.out[j]
			n.Status, n.OldPath, n.oldPerm, n.whiteout, n.oldReplacedBy = Renamed, c.Path, c.oldPerm, c.whiteout, c.replacedBy
			drop[i] = true
			added[c.Size] = slices.Delete(added[c.Size], k, k+1)
			break
		}
	}
	out := s.out[:0]
	for i, c := range s.out {
		if !drop[i] {
			out = append(out, c)
		}
	}
	s.out = out
	return nil
}
