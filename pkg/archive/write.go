package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// The sandbox user that owns copied-in files unless the caller says otherwise.
const (
	DefaultUID = 1000
	DefaultGID = 1000
)

// Reasons WriteTar refuses a host path. They are wrapped in a *SourceError; test for them
// with errors.Is.
var (
	ErrSpecialFile = errors.New("not a regular file, directory or symlink")
	ErrLinkOutside = errors.New("symlink does not stay inside the copied tree")
	ErrChanged     = errors.New("changed while being read")
)

// SourceError is a host path that WriteTar refused or could not read.
type SourceError struct {
	Path string // host path
	Err  error
}

func (e *SourceError) Error() string { return fmt.Sprintf("%s: %v", e.Path, e.Err) }
func (e *SourceError) Unwrap() error { return e.Err }

// Owner is a uid:gid pair written into archive headers.
type Owner struct{ UID, GID int }

// WriteOptions tunes WriteTar.
type WriteOptions struct {
	// Name is the archive name of the top entry; empty means the base name of src. It lets
	// the caller rename the item (sbx cp a.txt NAME:/tmp/b.txt). Ignored with Contents.
	Name string
	// Contents archives what is inside the directory src rather than src itself (SRC/.):
	// entries are named relative to src and there is no top entry.
	Contents bool
	// FollowLink follows src itself when it is a symlink (sbx cp --follow-link, like docker
	// cp -L). Symlinks inside the tree are never followed.
	FollowLink bool
	// KeepOwner writes each file's host uid and gid (sbx cp -a/--archive) instead of Owner.
	KeepOwner bool
	// Owner owns every entry unless KeepOwner; nil means DefaultUID:DefaultGID.
	Owner *Owner
	// Progress, if set, is called with running totals after every chunk of file data and
	// every other entry. It runs on the writing goroutine, so it must be quick.
	Progress func(Stats)
}

// WriteTar writes the host file or directory src to w as a tar stream for `tar -x` inside a
// sandbox, and returns what it wrote.
//
// Reading never follows a symlink inside the tree: a symlink is stored as a symlink only if
// its target is relative and resolves inside the tree (a dangling target is judged by its
// lexical path), otherwise WriteTar fails naming it. A src that is itself a symlink is
// refused unless FollowLink. Devices, FIFOs and sockets are refused, naming the path.
// Setuid and setgid bits are stripped; user and group names are never written. Hardlinked
// files are stored as separate files.
//
// On error the stream is left without its end-of-archive marker, so the reading side can
// tell it is incomplete; the caller must discard what it extracted.
func WriteTar(ctx context.Context, w io.Writer, src string, opts WriteOptions) (Stats, error) {
	tw := &tarWriter{ctx: ctx, tw: tar.NewWriter(w), opts: opts, src: src, buf: make([]byte, bufSize)}
	tw.owner = Owner{UID: DefaultUID, GID: DefaultGID}
	if opts.Owner != nil {
		tw.owner = *opts.Owner
	}
	if opts.KeepOwner && !ownerSupported {
		return Stats{}, errors.New("keeping file ownership is not supported on this platform")
	}
	if err := tw.run(); err != nil {
		return tw.stats, err
	}
	return tw.stats, tw.tw.Close()
}

type tarWriter struct {
	ctx   context.Context
	tw    *tar.Writer
	opts  WriteOptions
	owner Owner
	src   string
	stats Stats
	buf   []byte
}

func (w *tarWriter) run() error {
	name := w.opts.Name
	if !w.opts.Contents {
		if name == "" {
			name = filepath.Base(w.src)
		}
		if err := checkElement(name); err != nil {
			return errs.New(fmt.Errorf("cannot name the copied item after %q: %w", name, err), errs.CodeError,
				"copy the directory's contents (DIR/.) or give the destination a name")
		}
	}
	fi, err := os.Lstat(w.src)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if !w.opts.FollowLink {
			return errs.New(&SourceError{Path: w.src, Err: errors.New("is a symlink")}, errs.CodeError,
				"pass --follow-link to copy what it points to")
		}
		if fi, err = os.Stat(w.src); err != nil {
			return err
		}
	}
	switch {
	case fi.Mode().IsRegular():
		if w.opts.Contents {
			return &SourceError{Path: w.src, Err: errors.New("not a directory, so it has no contents to copy")}
		}
		return w.file(name, w.src, fi, func() (*os.File, error) {
			return os.OpenFile(w.src, os.O_RDONLY|openNonblock, 0)
		})
	case fi.IsDir():
		root, err := os.OpenRoot(w.src)
		if err != nil {
			return err
		}
		defer root.Close()
		if rfi, err := root.Stat("."); err != nil || !os.SameFile(fi, rfi) {
			return &SourceError{Path: w.src, Err: ErrChanged}
		}
		prefix := ""
		if !w.opts.Contents {
			prefix = name
			if err := w.header(prefix+"/", fi, tar.TypeDir, ""); err != nil {
				return err
			}
			w.stats.Dirs++
			w.progress()
		}
		return w.walk(root, ".", prefix)
	}
	return special(w.src, fi.Mode())
}

func special(host string, m fs.FileMode) error {
	kind := "irregular file"
	switch {
	case m&fs.ModeCharDevice != 0:
		kind = "character device"
	case m&fs.ModeDevice != 0:
		kind = "block device"
	case m&fs.ModeNamedPipe != 0:
		kind = "FIFO"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	}
	return &SourceError{Path: host, Err: fmt.Errorf("%w: a %s", ErrSpecialFile, kind)}
}

// walk archives the directory rel of root, naming entries under prefix.
func (w *tarWriter) walk(root *os.Root, rel, prefix string) error {
	// O_NONBLOCK: if the directory was swapped for a FIFO, opening it must not hang.
	f, err := root.OpenFile(rel, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return err
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, de := range ents {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		child := path.Join(rel, de.Name())
		name := path.Join(prefix, child)
		host := filepath.Join(w.src, filepath.FromSlash(child))
		fi, err := root.Lstat(child)
		if err != nil {
			return err
		}
		switch m := fi.Mode(); {
		case m.IsDir():
			if err := w.header(name+"/", fi, tar.TypeDir, ""); err != nil {
				return err
			}
			w.stats.Dirs++
			w.progress()
			if err := w.walk(root, child, prefix); err != nil {
				return err
			}
		case m.IsRegular():
			err := w.file(name, host, fi, func() (*os.File, error) {
				return root.OpenFile(child, os.O_RDONLY|openNonblock, 0)
			})
			if err != nil {
				return err
			}
		case m&fs.ModeSymlink != 0:
			if err := w.symlink(root, child, name, host, fi); err != nil {
				return err
			}
		default:
			return special(host, m)
		}
	}
	return nil
}

func (w *tarWriter) symlink(root *os.Root, child, name, host string, fi fs.FileInfo) error {
	target, err := root.Readlink(child)
	if err != nil {
		return err
	}
	if path.IsAbs(target) || filepath.IsAbs(target) {
		return &SourceError{Path: host, Err: fmt.Errorf("%w: it points to the absolute path %q", ErrLinkOutside, target)}
	}
	// os.Root resolves the whole chain and refuses any step out of the tree.
	if _, err := root.Stat(child); err != nil {
		lexical := path.Join(path.Dir(child), target)
		if !errors.Is(err, fs.ErrNotExist) || lexical == ".." || strings.HasPrefix(lexical, "../") {
			return &SourceError{Path: host, Err: fmt.Errorf("%w: %q (%v)", ErrLinkOutside, target, unwrapPath(err))}
		}
	}
	if err := w.header(name, fi, tar.TypeSymlink, target); err != nil {
		return err
	}
	w.stats.Symlinks++
	w.progress()
	return nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (w *tarWriter) file(name, host string, fi fs.FileInfo, open func() (*os.File, error)) error {
	f, err := open()
	if err != nil {
		return err
	}
	defer f.Close()
	// The path may have been swapped (for a symlink, a FIFO) since it was listed.
	ffi, err := f.Stat()
	if err != nil {
		return err
	}
	if !ffi.Mode().IsRegular() || !os.SameFile(fi, ffi) {
		return &SourceError{Path: host, Err: ErrChanged}
	}
	if err := w.header(name, ffi, tar.TypeReg, ""); err != nil {
		return err
	}
	w.stats.Files++
	// A file that grows is cut at the size in its header; one that shrinks cannot be
	// padded honestly, so it fails the copy.
	_, err = copyN(w.ctx, w.tw, f, ffi.Size(), w.buf, func(n int) {
		w.stats.Bytes += int64(n)
		w.progress()
	})
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &SourceError{Path: host, Err: fmt.Errorf("%w: the file shrank", ErrChanged)}
	}
	return err
}

func (w *tarWriter) header(name string, fi fs.FileInfo, typ byte, link string) error {
	mode := int64(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSticky != 0 {
		mode |= 0o1000 // c_ISVTX; setuid and setgid are dropped
	}
	uid, gid := w.owner.UID, w.owner.GID
	if w.opts.KeepOwner {
		uid, gid = fileOwner(fi)
	}
	hdr := &tar.Header{
		Typeflag: typ,
		Name:     name,
		Linkname: link,
		Mode:     mode,
		Uid:      uid,
		Gid:      gid,
		ModTime:  fi.ModTime(),
	}
	if typ == tar.TypeReg {
		hdr.Size = fi.Size()
	}
	return w.tw.WriteHeader(hdr)
}

func (w *tarWriter) progress() {
	if w.opts.Progress != nil {
		w.opts.Progress(w.stats)
	}
}
