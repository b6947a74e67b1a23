package overlay

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// DigestPrefix starts every change set digest.
const DigestPrefix = "sha256:"

// Digest identifies a change set: sbx diff prints it and sbx apply --expect refuses any other,
// so what lands on the host is what was reviewed. It is SHA-256 over one record per change, in
// the order given (Changes sorts by path): status, kind, path, old path, old and new modes,
// why it is protected, its conflict, a link's target, and for a file that is not deleted the
// SHA-256 of its content (hashContent). The same layers and selection give the same digest.
func (l Layers) Digest(changes []Change) (string, error) {
	up, err := openPath(l.Upper())
	if err != nil {
		return "", err
	}
	defer unix.Close(up)
	h := sha256.New()
	for _, c := range changes {
		content := ""
		if c.Kind == KindFile && c.Status != Deleted {
			f, err := openIn(up, true, c.Path)
			if err != nil {
				return "", fmt.Errorf("%s: %w", Quote(c.Path), err)
			}
			content, err = hashContent(f)
			f.Close()
			if err != nil {
				return "", fmt.Errorf("%s: %w", Quote(c.Path), err)
			}
		}
		for _, field := range []string{c.Status, c.Kind, c.Path, c.OldPath, c.OldMode, c.NewMode, c.Protected, c.Conflict, c.Target, content} {
			fmt.Fprintf(h, "%d:%s", len(field), field)
		}
		h.Write([]byte{'\n'})
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// hashContent is the SHA-256 of f's data extents, each with its offset and length, so a
// sparse file costs what it holds, not its size: holes are named, never read.
func hashContent(f *os.File) (string, error) {
	h := sha256.New()
	err := extents(f, func(off, n int64) error {
		fmt.Fprintf(h, "%d+%d\n", off, n)
		return copyAt(h, f, off, n)
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// extents calls fn for each data extent of f in order (SEEK_DATA and SEEK_HOLE), or once
// for the rest of the file where the file system cannot tell.
func extents(f *os.File, fn func(off, n int64) error) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size, fd := fi.Size(), int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole is left
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return fn(off, size-off)
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		hole = min(hole, size)
		if err := fn(data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// copyAt copies n bytes of f from off to w; fewer means the file changed while read.
func copyAt(w io.Writer, f *os.File, off, n int64) error {
	got, err := io.CopyBuffer(w, io.NewSectionReader(f, off, n), make([]byte, min(max(n, 1), 1<<20)))
	if err == nil && got != n {
		err = errors.New("changed while read")
	}
	return err
}

// copySparse writes src's data extents at the same offsets of dst and gives dst src's size,
// so holes stay holes on the host.
func copySparse(dst, src *os.File) error {
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	err = extents(src, func(off, n int64) error {
		return copyAt(&offsetWriter{f: dst, off: off}, src, off, n)
	})
	if err != nil {
		return err
	}
	return dst.Truncate(fi.Size())
}

// offsetWriter writes to f from off on, as copySparse places each extent.
type offsetWriter struct {
	f   *os.File
	off int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}
