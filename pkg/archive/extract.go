// Package archive holds the Docker-free parts of "sbx cp": the hardened extractor for copies
// out of a sandbox, the tar writer for copies into one, and the SRC/DST argument parser.
package archive

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Caps Extract applies unless the caller raises them (sbx cp --max-bytes, --max-entries,
// --max-depth).
const (
	DefaultMaxBytes   int64 = 1 << 30
	DefaultMaxEntries       = 100_000
	DefaultMaxDepth         = 64
)

// StagingPrefix starts the name of every staging directory Extract creates, so a later run
// can recognise leftovers of a killed copy.
const StagingPrefix = ".sbx-cp-"

const (
	blockSize = 512
	// maxNameLen bounds what a hostile stream can make Extract remember per entry.
	maxNameLen = 4096
	// maxTrailer bounds the zero padding read after the end-of-archive marker; tar pads to
	// its record size (10 KiB by default).
	maxTrailer = 1 << 20
	bufSize    = 256 << 10
)

// Stats counts what a copy wrote. The JSON names are part of sbx cp --json.
type Stats struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"` // WriteTar only: Extract refuses symlinks
	Bytes    int64 `json:"bytes"`    // file content bytes
}

// ExtractOptions tunes Extract. The zero value of a cap means its default.
type ExtractOptions struct {
	// Base is the single item the stream must hold, as `tar -C DIR -c BASE` writes it: the
	// base name of the sandbox path being copied. Every entry must be BASE or lie under
	// BASE/ (a leading "./" is accepted). "." means the stream was made with `tar -c .` and
	// behaves like Contents.
	Base string
	// Contents copies what is inside the Base directory rather than the directory itself
	// (sbx cp NAME:DIR/. DST).
	Contents bool

	MaxBytes   int64 // total file bytes; default DefaultMaxBytes
	MaxEntries int   // archive entries, of any type; default DefaultMaxEntries
	MaxDepth   int   // path elements in an entry name, Base included; default DefaultMaxDepth

	// Progress, if set, is called with running totals after every chunk of file data and
	// every directory. It runs on the extracting goroutine, so it must be quick.
	Progress func(Stats)

	// Guarded lists the absolute host directories a sandbox may write to (the project, a
	// writable bind). No symbolic link at or below them on the way to dst is followed: the
	// copy is refused with a *LinkError. Links elsewhere on the way are resolved.
	Guarded []string
	// Umask is cleared from the mode of every file and directory Extract creates: the
	// caller's umask, as for any file the user creates. 0 keeps the archive's modes.
	Umask fs.FileMode

	// Tests set these to act where a sandbox could race sbx: beforeOpen runs between
	// looking at a directory on the way to dst and opening it, beforeMove once the moves
	// into place are planned.
	beforeOpen func(path string)
	beforeMove func()
}

// Extract materialises the untrusted tar stream r (the output of `tar -c` inside a sandbox)
// at the absolute host path dst, with docker cp's rules for the destination:
//
//   - dst does not exist: the item is created as dst. dst's parent must exist, and if dst
//     ends in a separator (or "/.") the item must be a directory.
//   - dst is an existing directory: the item lands at dst/BASE. If dst/BASE is an existing
//     directory too, the item's contents are merged into it; if it is a file, a file item
//     replaces it and a directory item is an error. With Contents (or Base "."), the item
//     must be a directory and its contents are merged into dst itself.
//   - dst is an existing file: a file item replaces it; a directory item is an error, and so
//     is a dst that ends in a separator.
//
// Merging replaces existing files and keeps existing directories (and their modes), and
// never follows a symlink below dst: a symlink in the way counts as a file. A symlink on
// the way to dst (dst itself included) is refused when it lies in one of opts.Guarded, and
// resolved otherwise (see resolveDst).
//
// The whole stream is read, validated and written through an os.Root opened on a fresh
// staging directory (named StagingPrefix...) beside where the item lands, then renamed into
// place by directory descriptor, so a directory swapped for a link meanwhile is never
// followed. Staging directories that killed copies left there are removed first. On any
// error the staging directory is removed and dst is untouched; the one exception is a merge
// whose renames fail half way on the host (say, a permission change during the copy), which
// can leave some entries moved.
//
// Refused, with an *EntryError naming the entry: absolute names, names that leave the root
// after cleaning or contain "..", names outside Base at a path-element boundary, NUL or
// backslash in names, symlinks, hardlinks, devices, FIFOs and other special types, and
// entries whose data is shorter or longer than their header size. A stream cut short
// (no end-of-archive marker) or with data after it is refused too. Crossing a cap returns
// a *LimitError. Setuid, setgid and sticky bits are dropped, opts.Umask is applied, files
// belong to the calling user, and xattrs are never restored; modification times are kept.
func Extract(ctx context.Context, r io.Reader, dst string, opts ExtractOptions) (Stats, error) {
	opts, err := opts.resolve()
	if err != nil {
		return Stats{}, err
	}
	pl, err := place(dst, opts)
	if err != nil {
		return Stats{}, err
	}
	defer pl.dir.Close()
	claim(pl.dir)
	tmp, stage, err := makeStagingDir(pl.dir)
	if err != nil {
		return Stats{}, fmt.Errorf("creating a staging directory in %q: %w", pl.dir.path, err)
	}
	x := &extractor{
		opts:    opts,
		stage:   stage.root,
		entries: make(map[string]*staged),
		buf:     make([]byte, bufSize),
	}
	if opts.Base == "." {
		x.entries["."] = &staged{dir: true, mode: 0o755 &^ opts.Umask}
	}
	err = x.read(ctx, r)
	if err == nil {
		err = x.commit(ctx, tmp, stage, pl)
	}
	stage.Close()
	if err != nil {
		forceRemove(pl.dir.root, tmp)
		return x.stats, err
	}
	// What is left is the empty skeleton of merged directories, or nothing.
	if err := pl.dir.root.RemoveAll(tmp); err != nil {
		return x.stats, fmt.Errorf("copied, but could not remove the staging directory: %w", err)
	}
	return x.stats, nil
}

func (o ExtractOptions) resolve() (ExtractOptions, error) {
	if o.Base != "." {
		if err := checkElement(o.Base); err != nil {
			return o, fmt.Errorf("expected archive base %q: %w", o.Base, err)
		}
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	return o, nil
}

// checkElement accepts a single, ordinary path element.
func checkElement(s string) error {
	switch {
	case s == "" || s == "." || s == "..":
		return errors.New("not a file name")
	case strings.ContainsAny(s, "/\\\x00"):
		return errors.New("must be one path element, without NUL or backslash")
	}
	return nil
}

// CheckDestination checks dst as Extract would, without writing anything, so a caller can
// refuse a bad destination before it starts the copy.
func CheckDestination(dst string, opts ExtractOptions) error {
	opts, err := opts.resolve()
	if err != nil {
		return err
	}
	pl, err := place(dst, opts)
	if err != nil {
		return err
	}
	pl.dir.Close()
	return nil
}

// placement is where the staged item goes on the host.
type placement struct {
	dir       *hostDir // holds the staging directory
	name      string   // the item's final name in dir; empty to merge the item's contents into dir
	into      string   // host path of the item (or of the merge target), for messages
	mustBeDir bool     // dst was written as a directory but does not exist
	replace   bool     // name exists as a non-directory and a file item replaces it
}

func place(dst string, opts ExtractOptions) (placement, error) {
	switch {
	case dst == "":
		return placement{}, errors.New("empty destination path")
	case !filepath.IsAbs(dst):
		return placement{}, fmt.Errorf("destination %q is not an absolute path", dst)
	}
	dirOnly := strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, string(filepath.Separator)) ||
		filepath.Base(dst) == "."
	res, err := resolveDst(filepath.Clean(dst), opts)
	if err != nil {
		return placement{}, err
	}
	d := res.dir
	into := filepath.Join(d.path, res.leaf)
	switch {
	case res.leaf != "" && res.fi == nil:
		return placement{dir: d, name: res.leaf, into: into, mustBeDir: dirOnly}, nil
	case res.leaf != "" && dirOnly:
		d.Close()
		return placement{}, fmt.Errorf("destination %q is not a directory", dst)
	case res.leaf != "":
		return placement{dir: d, name: res.leaf, into: into, replace: true}, nil
	case opts.Contents || opts.Base == ".":
		return placement{dir: d, into: d.path}, nil
	}
	base := opts.Base
	item := filepath.Join(d.path, base)
	li, err := d.root.Lstat(base)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return placement{dir: d, name: base, into: item}, nil
	case err != nil:
		d.Close()
		return placement{}, fmt.Errorf("destination: %w", err)
	case li.IsDir():
		sub, err := d.child(base, li)
		d.Close()
		if err != nil {
			return placement{}, err
		}
		return placement{dir: sub, into: item}, nil
	}
	return placement{dir: d, name: base, into: item, replace: true}, nil
}

// makeStagingDir creates a fresh staging directory in d and opens it, checking that what
// it opens is the directory it created.
func makeStagingDir(d *hostDir) (string, *hostDir, error) {
	var name string
	var err error
	for range 10 {
		name = StagingPrefix + strings.ToLower(rand.Text())
		if err = d.root.Mkdir(name, 0o700); !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", nil, err
	}
	fi, err := d.root.Lstat(name)
	if err == nil && !fi.IsDir() {
		err = errChanged(filepath.Join(d.path, name))
	}
	var stage *hostDir
	if err == nil {
		stage, err = d.child(name, fi)
	}
	if err != nil {
		forceRemove(d.root, name)
		return "", nil, err
	}
	return name, stage, nil
}

// forceRemove removes a staging directory even when the modes it was given (say 0o500)
// would stop RemoveAll.
func forceRemove(root *os.Root, name string) {
	if root.RemoveAll(name) == nil {
		return
	}
	var unlock func(string)
	unlock = func(dir string) {
		_ = root.Chmod(dir, 0o700)
		f, err := root.Open(dir)
		if err != nil {
			return
		}
		ents, _ := f.ReadDir(-1)
		f.Close()
		for _, e := range ents {
			if e.IsDir() {
				unlock(path.Join(dir, e.Name()))
			}
		}
	}
	unlock(name)
	_ = root.RemoveAll(name)
}

type staged struct {
	dir   bool
	mode  fs.FileMode // directories: applied once everything is written
	mtime time.Time   // directories; zero for implicit ones
}

type extractor struct {
	opts    ExtractOptions
	stage   *os.Root
	entries map[string]*staged // cleaned name -> what the stage holds there
	stats   Stats
	buf     []byte
	count   int
	last    string // raw name of the last entry, for errors about what follows it
	seen    bool   // a file or directory entry was staged

	// A Root on the directory of the last file, so each file in it costs one open rather
	// than a walk of its whole path: tar lists a directory's files together.
	dirName string
	dirRoot *os.Root
}

// streamReader counts the bytes tar reads and checks that the padding after an entry's
// data is zero: non-zero padding is data the header did not declare.
type streamReader struct {
	r         io.Reader
	n         int64
	zeroUntil int64
	badPad    bool
}

func (s *streamReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if s.n < s.zeroUntil && n > 0 {
		for _, c := range p[:min(int64(n), s.zeroUntil-s.n)] {
			if c != 0 {
				s.badPad = true
				break
			}
		}
	}
	s.n += int64(n)
	return n, err
}

func roundBlock(n int64) int64 { return (n + blockSize - 1) / blockSize * blockSize }

func (x *extractor) read(ctx context.Context, r io.Reader) error {
	defer x.closeDir()
	sr := &streamReader{r: r}
	tr := tar.NewReader(sr)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := sr.n // every entry's data has been read to its end
		sr.zeroUntil = roundBlock(end)
		hdr, err := tr.Next()
		if sr.badPad {
			return entryErr(x.last, fmt.Errorf("%w: more data follows than the header says", ErrSizeMismatch))
		}
		if err == io.EOF {
			// tar.Reader also says EOF when the stream stops at a header boundary, so check
			// that it really read the two zero blocks of the end-of-archive marker.
			if sr.n != roundBlock(end)+2*blockSize {
				return x.truncated()
			}
			if err := x.checkTrailer(ctx, sr); err != nil {
				return err
			}
			if !x.seen {
				return fmt.Errorf("%w: the archive holds no entries (expected %q)", ErrCorrupt, x.opts.Base)
			}
			return nil
		}
		// ErrInsecurePath (GODEBUG=tarinsecurepath=0) comes with a header; our own name
		// checks refuse such names and say which rule they break.
		if err != nil && (hdr == nil || !errors.Is(err, tar.ErrInsecurePath)) {
			return x.streamErr(err)
		}
		if err := x.entry(ctx, tr, hdr); err != nil {
			return err
		}
	}
}

func (x *extractor) truncated() error {
	if x.last == "" {
		return fmt.Errorf("%w: the archive is empty or truncated", ErrCorrupt)
	}
	return entryErr(x.last, fmt.Errorf("%w: the archive ends after this entry without its end-of-archive marker", ErrCorrupt))
}

func (x *extractor) streamErr(err error) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return x.truncated()
	case !errors.Is(err, tar.ErrHeader):
		return fmt.Errorf("reading the archive: %w", err)
	case x.last == "":
		return fmt.Errorf("%w: invalid first header: %w", ErrCorrupt, err)
	}
	return entryErr(x.last, fmt.Errorf("%w: the header after this entry is invalid, "+
		"so the entry may hold more data than its header says: %w", ErrCorrupt, err))
}

// checkTrailer reads what follows the end-of-archive marker, which must be zero padding.
func (x *extractor) checkTrailer(ctx context.Context, r io.Reader) error {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := r.Read(x.buf)
		if slices.ContainsFunc(x.buf[:n], func(c byte) bool { return c != 0 }) {
			return entryErr(x.last, fmt.Errorf("%w: data follows the end-of-archive marker", ErrCorrupt))
		}
		if total += int64(n); total > maxTrailer {
			return entryErr(x.last, fmt.Errorf("%w: more than %d bytes follow the end-of-archive marker", ErrCorrupt, maxTrailer))
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
	}
}

func (x *extractor) entry(ctx context.Context, tr *tar.Reader, hdr *tar.Header) error {
	x.count++
	if x.count > x.opts.MaxEntries {
		return &LimitError{Entry: hdr.Name, Cap: "entry count", Limit: int64(x.opts.MaxEntries), Unit: "entries", Flag: "--max-entries"}
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // PAX defaults for later entries; none of them matter here
	}
	x.last = hdr.Name
	name, err := cleanName(hdr.Name, x.opts.Base)
	if err != nil {
		return entryErr(hdr.Name, err)
	}
	if d := depth(name); d > x.opts.MaxDepth {
		return &LimitError{Entry: hdr.Name, Cap: "path depth", Limit: int64(x.opts.MaxDepth), Unit: "levels", Flag: "--max-depth"}
	}
	switch hdr.Typeflag {
	case tar.TypeReg:
		return x.file(ctx, tr, hdr, name)
	case tar.TypeDir:
		if hdr.Size != 0 {
			return entryErr(hdr.Name, fmt.Errorf("%w: a directory with %d bytes of data", ErrSizeMismatch, hdr.Size))
		}
		return x.dir(hdr, name)
	case tar.TypeSymlink:
		return entryErr(hdr.Name, fmt.Errorf("%w (target %q)", ErrSymlink, hdr.Linkname))
	case tar.TypeLink:
		return entryErr(hdr.Name, fmt.Errorf("%w (target %q)", ErrHardlink, hdr.Linkname))
	case tar.TypeChar, tar.TypeBlock:
		return entryErr(hdr.Name, ErrDevice)
	case tar.TypeFifo:
		return entryErr(hdr.Name, ErrFIFO)
	}
	return entryErr(hdr.Name, fmt.Errorf("%w %q", ErrUnsupported, string(hdr.Typeflag)))
}

// cleanName validates an entry name and returns it cleaned, relative to the staging root.
func cleanName(name, base string) (string, error) {
	switch {
	case name == "":
		return "", ErrEmptyName
	case strings.ContainsAny(name, "\x00\\"):
		return "", ErrBadChar
	case len(name) > maxNameLen:
		return "", ErrLongName
	case strings.HasPrefix(name, "/"):
		return "", ErrAbsolute
	}
	clean := path.Clean(name)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", ErrEscapes
	}
	// `tar -c` never writes "..": refuse it even where cleaning would keep the name inside.
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", ErrDotDot
	}
	if clean != "." && !filepath.IsLocal(filepath.FromSlash(clean)) {
		return "", ErrEscapes // a volume name or a reserved name, on Windows
	}
	if base != "." && clean != base && !strings.HasPrefix(clean, base+"/") {
		return "", ErrOutsideBase
	}
	return clean, nil
}

func depth(clean string) int {
	if clean == "." {
		return 0
	}
	return strings.Count(clean, "/") + 1
}

func (x *extractor) file(ctx context.Context, tr *tar.Reader, hdr *tar.Header, name string) error {
	if hdr.Size > x.opts.MaxBytes-x.stats.Bytes {
		return &LimitError{Entry: hdr.Name, Cap: "total size", Limit: x.opts.MaxBytes, Unit: "bytes", Flag: "--max-bytes"}
	}
	// A later entry of the same name wins, as with tar -x.
	e, existed := x.entries[name]
	if existed && e.dir {
		return entryErr(hdr.Name, fmt.Errorf("%w: a file where a directory was", ErrConflict))
	}
	if !existed {
		if err := x.mkParents(hdr.Name, name); err != nil {
			return err
		}
		x.entries[name] = &staged{}
		x.stats.Files++
	}
	x.seen = true
	dir, leaf := path.Split(name)
	root, err := x.openDir(dir)
	if err != nil {
		return entryErr(hdr.Name, err)
	}
	if existed {
		if err := root.Remove(leaf); err != nil {
			return entryErr(hdr.Name, err)
		}
	}
	f, err := root.OpenFile(leaf, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return entryErr(hdr.Name, err)
	}
	_, err = copyN(ctx, f, tr, hdr.Size, x.buf, func(n int) {
		x.stats.Bytes += int64(n)
		x.progress()
	})
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w: the stream ends before the %d bytes its header declares", ErrSizeMismatch, hdr.Size)
	}
	if err == nil {
		err = f.Chmod(x.mode(hdr))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chtimes(leaf, hdr.ModTime, hdr.ModTime)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return entryErr(hdr.Name, err)
	}
	return nil
}

func (x *extractor) dir(hdr *tar.Header, name string) error {
	e, ok := x.entries[name]
	if ok && !e.dir {
		return entryErr(hdr.Name, fmt.Errorf("%w: a directory where a file was", ErrConflict))
	}
	if !ok {
		if err := x.mkParents(hdr.Name, name); err != nil {
			return err
		}
		if err := x.stage.Mkdir(name, 0o700); err != nil {
			return entryErr(hdr.Name, err)
		}
		e = &staged{dir: true}
		x.entries[name] = e
		x.stats.Dirs++
	}
	x.seen = true
	e.mode = x.mode(hdr)
	e.mtime = hdr.ModTime
	x.progress()
	return nil
}

// openDir returns a Root on the staged directory dir ("" for the stage itself), reusing
// the last one.
func (x *extractor) openDir(dir string) (*os.Root, error) {
	if dir == "" {
		return x.stage, nil
	}
	if x.dirRoot != nil && x.dirName == dir {
		return x.dirRoot, nil
	}
	x.closeDir()
	r, err := x.stage.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	x.dirName, x.dirRoot = dir, r
	return r, nil
}

func (x *extractor) closeDir() {
	if x.dirRoot != nil {
		x.dirRoot.Close()
		x.dirName, x.dirRoot = "", nil
	}
}

// mkParents creates the directories above name that the stream has not created yet. They
// stay 0o700 while staging; at commit they get 0o755 less the umask: a directory the
// archive does not describe is never made group- or world-writable.
func (x *extractor) mkParents(raw, name string) error {
	for i := range len(name) {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		if e, ok := x.entries[p]; ok {
			if !e.dir {
				return entryErr(raw, fmt.Errorf("%w: its parent %q is a file", ErrConflict, p))
			}
			continue
		}
		if err := x.stage.Mkdir(p, 0o700); err != nil {
			return entryErr(raw, err)
		}
		x.entries[p] = &staged{dir: true, mode: 0o755 &^ x.opts.Umask}
		x.stats.Dirs++
	}
	return nil
}

// mode is the mode an entry gets on the host: its permission bits (never setuid, setgid
// or sticky, which fs.ModePerm leaves out) less the umask.
func (x *extractor) mode(hdr *tar.Header) fs.FileMode {
	return fs.FileMode(hdr.Mode) & fs.ModePerm &^ x.opts.Umask
}

func (x *extractor) progress() {
	if x.opts.Progress != nil {
		x.opts.Progress(x.stats)
	}
}

// mergeDir is a staged directory whose contents go into an existing host directory.
type mergeDir struct {
	from  string      // the staged directory, relative to the stage
	name  string      // the host directory's name in its parent; "" for the top one
	fi    fs.FileInfo // the host directory as planned; it must still be that one to move into
	moves []string    // entries of from renamed into the host directory
	subs  []*mergeDir // entries of from merged into host directories of the same name
}

// commit moves the staged item into place. Every check that can fail on the stream's
// content happens before the first rename. Every rename and mode change goes by the
// descriptors of directories checked to be the ones planned, never by a path that a
// directory swapped for a link could redirect.
func (x *extractor) commit(ctx context.Context, tmp string, stage *hostDir, pl placement) error {
	base := x.opts.Base
	item := x.entries[base]
	contents := x.opts.Contents || base == "."
	var merge *mergeDir
	kept := map[string]bool{} // staged directories that merge into existing ones
	switch {
	case !item.dir && contents:
		return fmt.Errorf("%q is not a directory, so it has no contents to copy", base)
	case pl.name == "" && !item.dir:
		return fmt.Errorf("cannot overwrite directory %q with a file", pl.into)
	case pl.name == "":
		kept[base] = true
		merge = &mergeDir{from: base}
		if err := x.planMerge(pl.dir, merge, kept); err != nil {
			return err
		}
	case item.dir && pl.replace:
		return fmt.Errorf("cannot overwrite non-directory %q with a directory", pl.into)
	case !item.dir && pl.mustBeDir:
		return fmt.Errorf("destination directory %q does not exist (the copied item is a file)", pl.into)
	}

	// A directory needs write permission to be moved to another parent (its ".." changes),
	// so the modes of moved directories are applied after the move.
	moved := map[string]bool{base: merge == nil}
	merge.walk(func(m *mergeDir) {
		for _, n := range m.moves {
			moved[path.Join(m.from, n)] = true
		}
	})
	var dirs []string
	for name, e := range x.entries {
		if e.dir && !kept[name] && !moved[name] {
			dirs = append(dirs, name)
		}
	}
	// Deepest first, so setting a directory's time is not undone by work inside it.
	slices.SortFunc(dirs, func(a, b string) int { return depth(b) - depth(a) })
	for _, d := range dirs {
		if err := x.finishDir(d, x.entries[d]); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if x.opts.beforeMove != nil {
		x.opts.beforeMove()
	}
	if merge != nil {
		return x.moveMerged(stage, pl.dir, merge)
	}
	if base == "." {
		// The stage itself is the item.
		return x.move(pl.dir, tmp, item, pl.dir, pl.name)
	}
	return x.move(stage, base, item, pl.dir, pl.name)
}

// move renames the staged entry e, named from in the directory src, to name in the host
// directory dst, then gives a directory its mode.
func (x *extractor) move(src *hostDir, from string, e *staged, dst *hostDir, name string) error {
	if err := renameAt(src, from, dst, name); err != nil {
		return fmt.Errorf("moving into %q: %w", dst.path, err)
	}
	if e.dir {
		if err := setDirAttrs(dst, name, e.mode, e.mtime); err != nil {
			return fmt.Errorf("setting the mode of %q: %w", filepath.Join(dst.path, name), err)
		}
	}
	return nil
}

// moveMerged carries out the plan m in the host directory dst, which it opens level by
// level, each checked to be the directory planMerge looked at.
func (x *extractor) moveMerged(stage, dst *hostDir, m *mergeDir) error {
	r, err := stage.root.OpenRoot(m.from)
	if err != nil {
		return err
	}
	src, err := newHostDir(r, filepath.Join(stage.path, m.from))
	if err != nil {
		return err
	}
	defer src.Close()
	for _, n := range m.moves {
		if err := x.move(src, n, x.entries[path.Join(m.from, n)], dst, n); err != nil {
			return err
		}
	}
	for _, sub := range m.subs {
		if err := dst.inChild(sub.name, sub.fi, func(d *hostDir) error { return x.moveMerged(stage, d, sub) }); err != nil {
			return err
		}
	}
	return nil
}

// walk calls f on m and every merge below it.
func (m *mergeDir) walk(f func(*mergeDir)) {
	if m == nil {
		return
	}
	f(m)
	for _, s := range m.subs {
		s.walk(f)
	}
}

func (x *extractor) finishDir(name string, e *staged) error {
	if err := x.stage.Chmod(name, e.mode); err != nil {
		return fmt.Errorf("setting the mode of %q: %w", name, err)
	}
	if !e.mtime.IsZero() {
		if err := x.stage.Chtimes(name, e.mtime, e.mtime); err != nil {
			return fmt.Errorf("setting the times of %q: %w", name, err)
		}
	}
	return nil
}

// planMerge plans merging the staged directory m.from into the host directory dst,
// checking every collision before anything moves.
func (x *extractor) planMerge(dst *hostDir, m *mergeDir, kept map[string]bool) error {
	f, err := x.stage.Open(m.from)
	if err != nil {
		return err
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, de := range ents {
		n := de.Name()
		s := path.Join(m.from, n)
		e := x.entries[s]
		if e == nil {
			return fmt.Errorf("staging directory holds %q, which the archive did not create", s)
		}
		fi, err := dst.root.Lstat(n)
		host := filepath.Join(dst.path, n)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			m.moves = append(m.moves, n)
		case err != nil:
			return fmt.Errorf("destination: %w", err)
		case fi.IsDir() && e.dir:
			kept[s] = true
			sub := &mergeDir{from: s, name: n, fi: fi}
			if err := dst.inChild(n, fi, func(d *hostDir) error { return x.planMerge(d, sub, kept) }); err != nil {
				return err
			}
			m.subs = append(m.subs, sub)
		case fi.IsDir():
			return fmt.Errorf("cannot overwrite directory %q with a file", host)
		case e.dir:
			return fmt.Errorf("cannot overwrite non-directory %q with a directory", host)
		default:
			m.moves = append(m.moves, n)
		}
	}
	return nil
}

// copyN copies exactly n bytes from r to w through buf, checking ctx between chunks and
// reporting each one. A reader that ends early yields io.ErrUnexpectedEOF.
func copyN(ctx context.Context, w io.Writer, r io.Reader, n int64, buf []byte, chunk func(int)) (int64, error) {
	var done int64
	for done < n {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		b := buf
		if rest := n - done; rest < int64(len(b)) {
			b = b[:rest]
		}
		k, err := r.Read(b)
		if k > 0 {
			if _, werr := w.Write(b[:k]); werr != nil {
				return done, werr
			}
			done += int64(k)
			chunk(k)
		}
		if err == io.EOF && done < n {
			return done, io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return done, err
		}
	}
	return done, nil
}
