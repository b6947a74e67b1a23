package overlay

import (
	"archive/tar"
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

	"golang.org/x/sys/unix"

	"github.com/sbx-sandbox/sbx/internal/lazyre"
	"github.com/sbx-sandbox/sbx/pkg/hostfs"
)

// A checkpoint is the upper layer as it was, kept as an uncompressed tar in the layers'
// directory (checkpoints/LABEL.tar): the sandbox's changes only, never the project, with its
// whiteouts (character devices 0/0) and opaque marks (user.overlay.opaque, as a PAX xattr
// record). A rollback extracts it into a fresh directory and swaps it for the upper layer,
// which must not be mounted then: the sandbox is stopped (workspace.Workspaces.Rollback).

const opaqueRecord = "SCHILY.xattr.user.overlay.opaque"

var labelRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidLabel checks a checkpoint's label: letters, digits, '_', '.' and '-', at most 64,
// starting with a letter or digit ("ls" names the listing command).
func ValidLabel(label string) error {
	if !labelRE().MatchString(label) || label == "ls" {
		return fmt.Errorf("checkpoint label %q: use letters, digits, '_', '.' and '-' (at most 64, not \"ls\")", label)
	}
	return nil
}

// Checkpoint is one recorded state of the upper layer; its JSON names are stable.
type Checkpoint struct {
	Label   string    `json:"label"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"`
}

func (l Layers) checkpointDir() string { return filepath.Join(l.Dir, "checkpoints") }

func (l Layers) checkpointPath(label string) string {
	return filepath.Join(l.checkpointDir(), label+".tar")
}

// Checkpoint records the upper layer under label, replacing a checkpoint of that label. It
// reads the layer as it is: a command writing at the same time may be caught half-way, so
// take checkpoints between commands.
func (l Layers) Checkpoint(label string) (Checkpoint, error) {
	if err := l.notCarried("checkpoints"); err != nil {
		return Checkpoint{}, err
	}
	if err := ValidLabel(label); err != nil {
		return Checkpoint{}, err
	}
	if err := os.MkdirAll(l.checkpointDir(), 0o700); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", label, err)
	}
	tmp, err := os.CreateTemp(l.checkpointDir(), ".tmp-*")
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", label, err)
	}
	defer os.Remove(tmp.Name())
	up, err := openPath(l.Upper())
	if err == nil {
		tw := tar.NewWriter(tmp)
		err = archiveDir(tw, up, "")
		unix.Close(up)
		if err == nil {
			err = tw.Close()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), l.checkpointPath(label))
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", label, err)
	}
	fi, err := os.Stat(l.checkpointPath(label))
	if err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Label: label, Created: fi.ModTime().UTC(), Size: fi.Size()}, nil
}

// archiveDir writes what is in the upper directory rel, open as d, to tw.
func archiveDir(tw *tar.Writer, d int, rel string) error {
	ns, err := names(d)
	if err != nil {
		return err
	}
	for _, name := range ns {
		p := join(rel, name)
		st, ok, err := lstatAt(d, name)
		if err != nil || !ok {
			continue // gone since the listing
		}
		h := &tar.Header{Name: p, Mode: int64(perm(st)), Uid: int(st.Uid), Gid: int(st.Gid), Format: tar.FormatPAX}
		switch {
		case isWhiteout(st):
			h.Typeflag = tar.TypeChar
		case kindOf(st) == KindDir:
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
			if isOpaque(d, name) {
				h.PAXRecords = map[string]string{opaqueRecord: "y"}
			}
		case kindOf(st) == KindSymlink:
			if h.Linkname, err = readLink(d, name); err != nil {
				return err
			}
			h.Typeflag = tar.TypeSymlink
		case kindOf(st) == KindFile:
			h.Typeflag, h.Size = tar.TypeReg, st.Size
		default:
			continue // a FIFO, socket or device the sandbox made is not part of its work
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := openFile(d, name, true)
			if err != nil {
				return fmt.Errorf("%s: %w", Quote(p), err)
			}
			_, err = io.Copy(tw, io.LimitReader(f, st.Size))
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w (changed while recorded?)", Quote(p), err)
			}
		}
		if h.Typeflag == tar.TypeDir {
			sub, err := openDir(d, name)
			if err != nil {
				return fmt.Errorf("%s: %w", Quote(p), err)
			}
			err = archiveDir(tw, sub, p)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Checkpoints lists the recorded checkpoints, oldest first.
func (l Layers) Checkpoints() ([]Checkpoint, error) {
	entries, err := os.ReadDir(l.checkpointDir())
	if errors.Is(err, fs.ErrNotExist) {
		return []Checkpoint{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []Checkpoint{}
	for _, e := range entries {
		label, ok := strings.CutSuffix(e.Name(), ".tar")
		if !ok || ValidLabel(label) != nil || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Checkpoint{Label: label, Created: fi.ModTime().UTC(), Size: fi.Size()})
	}
	slices.SortFunc(out, func(a, b Checkpoint) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Rollback makes the upper layer what checkpoint label recorded. The overlay must not be
// mounted (the sandbox stopped): the checkpoint is extracted beside the upper layer, which
// is then swapped for it, so an interrupted rollback leaves the old layer or the new one.
func (l Layers) Rollback(label string) error {
	if err := l.notCarried("checkpoints"); err != nil {
		return err
	}
	if err := ValidLabel(label); err != nil {
		return err
	}
	f, err := os.Open(l.checkpointPath(label))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no checkpoint %q", label)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fresh, err := os.MkdirTemp(l.Dir, ".rollback-*")
	if err != nil {
		return err
	}
	defer hostfs.RemoveTree(fresh, false)
	fi, err := os.Stat(l.Upper())
	if err != nil {
		return err
	}
	if err := extract(tar.NewReader(f), fresh); err != nil {
		return fmt.Errorf("rolling back to %s: %w", label, err)
	}
	// The upper layer's root is /workspace itself: its owner and mode stay.
	if st, ok := fi.Sys().(*unix.Stat_t); ok && os.Geteuid() == 0 {
		if err := os.Lchown(fresh, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if err := os.Chmod(fresh, fi.Mode().Perm()); err != nil {
		return err
	}
	old := l.Upper() + ".old"
	if err := hostfs.RemoveTree(old, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(l.Upper(), old); err != nil {
		return err
	}
	if err := os.Rename(fresh, l.Upper()); err != nil {
		_ = os.Rename(old, l.Upper())
		return err
	}
	return hostfs.RemoveTree(old, false)
}

// extract writes the checkpoint tr into the empty directory dir: each entry through its
// parent's descriptor without following a link, directories writable until the end.
func extract(tr *tar.Reader, dir string) error {
	root, err := openPath(dir)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	type dirMode struct {
		path string
		mode uint32
	}
	var dirs []dirMode
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.Clean(name) != name || strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") {
			return fmt.Errorf("bad entry %q", h.Name)
		}
		mode := uint32(h.Mode) & 0o7777
		err = inDir(root, name, func(d int, base string) error {
			switch h.Typeflag {
			case tar.TypeDir:
				if err := unix.Mkdirat(d, base, 0o700); err != nil {
					return err
				}
				dirs = append(dirs, dirMode{name, mode})
				if h.PAXRecords[opaqueRecord] == "y" {
					fd, err := unix.Openat(d, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
					if err != nil {
						return err
					}
					defer unix.Close(fd)
					return unix.Fsetxattr(fd, "user.overlay.opaque", []byte("y"), 0)
				}
			case tar.TypeChar:
				return mkWhiteout(d, base)
			case tar.TypeSymlink:
				return unix.Symlinkat(h.Linkname, d, base)
			case tar.TypeReg:
				fd, err := unix.Openat(d, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
				if err != nil {
					return err
				}
				out := os.NewFile(uintptr(fd), base)
				defer out.Close()
				if _, err := io.Copy(out, io.LimitReader(tr, h.Size)); err != nil {
					return err
				}
				if err := out.Chmod(os.FileMode(mode) & os.ModePerm); err != nil {
					return err
				}
			default:
				return fmt.Errorf("entry %q of type %c", h.Name, h.Typeflag)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", Quote(name), err)
		}
		if os.Geteuid() == 0 {
			if err := inDir(root, name, func(d int, base string) error {
				return unix.Fchownat(d, base, h.Uid, h.Gid, unix.AT_SYMLINK_NOFOLLOW)
			}); err != nil {
				return err
			}
		}
	}
	// Deepest first, so a directory made read-only comes after what is in it.
	for _, dm := range slices.Backward(dirs) {
		if err := inDir(root, dm.path, func(d int, base string) error { return chmodAt(d, base, dm.mode) }); err != nil {
			return err
		}
	}
	return nil
}
