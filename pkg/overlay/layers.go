// Package overlay is the overlay workspace: the project as the lower layer, the sandbox's
// writes in an upper layer of its own in sbx's state directory, and what sbx diff, apply and
// discard make of that upper layer. Everything in the upper layer is the sandbox's doing:
// it is read without following a link, with bounded reads, and the project is written only
// through descriptors opened without following one.
package overlay

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Layers are the host directories of one sandbox's overlay workspace.
type Layers struct {
	// Lower is the project root on the host, which the sandbox sees but never writes.
	Lower string
	// Dir is sbx's directory for the sandbox's overlay: upper/, work/ and the manifest.
	Dir string
	// Carried says the workspace is a copy in the sandbox's volume (carry.go): Upper holds
	// the sandbox's whole workspace, fetched for this diff or apply.
	Carried bool
}

// Upper is where the sandbox's changes land.
func (l Layers) Upper() string { return filepath.Join(l.Dir, "upper") }

// Work is overlayfs's work directory, on the same filesystem as Upper.
func (l Layers) Work() string { return filepath.Join(l.Dir, "work") }

func (l Layers) manifestPath() string { return filepath.Join(l.Dir, "manifest") }

// MountOptions are the local volume driver's options that mount the overlay. userxattr
// makes overlayfs mark opaque directories with user.overlay.opaque, which the owner of the
// upper layer can read without privilege (trusted.overlay.* needs CAP_SYS_ADMIN).
func (l Layers) MountOptions() map[string]string {
	return map[string]string{
		"type":   "overlay",
		"device": "overlay",
		"o":      "lowerdir=" + l.Lower + ",upperdir=" + l.Upper() + ",workdir=" + l.Work() + ",userxattr",
	}
}

// maxManifest bounds the project entries recorded at create, and so the manifest read back.
const maxManifest = 1_000_000

// entry is what the manifest records of one project path when the sandbox was created: a
// later lstat that differs in any of these is a change the host made.
type entry struct {
	Path  string `json:"p"`
	Mode  uint32 `json:"m"`
	Size  int64  `json:"s"`
	Mtime int64  `json:"t"`
	Ino   uint64 `json:"i"`
	// Hash is the SHA-256 of a carried file's content or symlink's target (carry.go).
	Hash string `json:"h,omitempty"`
}

func entryOf(rel string, fi fs.FileInfo) entry {
	e := entry{Path: rel, Mode: uint32(fi.Mode()), Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Ino = st.Ino
	}
	if fi.IsDir() {
		// A directory's size and times change whenever the host adds to it: only its
		// existence and mode count.
		e.Size, e.Mtime, e.Ino = 0, 0, 0
	}
	return e
}

// Prepare makes the layers of a new sandbox that runs as uid:gid, or keeps those that exist
// (a recreated sandbox keeps its changes). The upper layer belongs to the sandbox user,
// without which nothing new could be created in /workspace, and it takes the project root's
// mode, since the upper layer's root is what the sandbox sees at /workspace. The manifest
// records every project path as it is now: sbx apply refuses a path the host changed since.
func Prepare(l Layers, uid, gid int) error {
	if fi, err := os.Lstat(l.Upper()); err == nil && fi.IsDir() {
		return nil
	}
	root, err := os.Lstat(l.Lower)
	if err != nil {
		return fmt.Errorf("overlay workspace: %w", err)
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return fmt.Errorf("overlay workspace: %w", err)
	}
	if err := writeManifest(l); err != nil {
		return err
	}
	for _, d := range []string{l.Work(), l.Upper()} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("overlay workspace: %w", err)
		}
	}
	if err := os.Chmod(l.Upper(), root.Mode().Perm()); err != nil {
		return fmt.Errorf("overlay workspace: %w", err)
	}
	if os.Geteuid() == uid {
		return nil
	}
	if err := os.Lchown(l.Upper(), uid, gid); err != nil {
		_ = os.RemoveAll(l.Dir)
		return errs.Failure(fmt.Errorf("overlay workspace: the upper layer must belong to the sandbox user %d:%d, and sbx (uid %d) cannot give it away: %w", uid, gid, os.Geteuid(), err),
			fmt.Sprintf("run the sandbox as yourself (user: %d:%d, the default when you own the project) or run sbx as root", os.Geteuid(), os.Getegid()))
	}
	return nil
}

func writeManifest(l Layers) error {
	tmp, err := os.CreateTemp(l.Dir, ".manifest.*")
	if err != nil {
		return fmt.Errorf("overlay workspace: %w", err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	enc := json.NewEncoder(w)
	n := 0
	err = filepath.WalkDir(l.Lower, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == l.Lower {
			return nil
		}
		if n++; n > maxManifest {
			return errs.Failure(fmt.Errorf("the project holds more than %d files and directories", maxManifest), "use workspace: ro or rw for this project")
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(l.Lower, p)
		return enc.Encode(entryOf(filepath.ToSlash(rel), fi))
	})
	if err == nil {
		err = w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), l.manifestPath())
	}
	if err != nil {
		return fmt.Errorf("overlay workspace: recording the project: %w", err)
	}
	return nil
}

// manifest is the project as the sandbox first saw it.
type manifest map[string]entry

func readManifest(l Layers) (manifest, error) {
	f, err := os.Open(l.manifestPath())
	if err != nil {
		return nil, fmt.Errorf("reading the overlay's manifest: %w", err)
	}
	defer f.Close()
	m := manifest{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 64*1024)
	for sc.Scan() {
		if len(m) >= maxManifest {
			return nil, fmt.Errorf("reading the overlay's manifest: more than %d entries", maxManifest)
		}
		var e entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("reading the overlay's manifest: %w", err)
		}
		m[e.Path] = e
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the overlay's manifest: %w", err)
	}
	return m, nil
}

// hostChange says how the project path rel differs from what the manifest recorded, or ""
// when it does not.
func (m manifest) hostChange(lower, rel string) string {
	old, had := m[rel]
	fi, err := os.Lstat(filepath.Join(lower, filepath.FromSlash(rel)))
	switch {
	case err != nil && !had:
		return ""
	case err != nil:
		return "deleted on the host since the sandbox was created"
	case !had:
		return "created on the host since the sandbox was created"
	case entryOf(rel, fi) != entry{Path: old.Path, Mode: old.Mode, Size: old.Size, Mtime: old.Mtime, Ino: old.Ino}:
		return "changed on the host since the sandbox was created"
	}
	return ""
}

func (m manifest) write(l Layers) error {
	tmp, err := os.CreateTemp(l.Dir, ".manifest.*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	enc := json.NewEncoder(w)
	for _, e := range m {
		if err := enc.Encode(e); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), l.manifestPath())
}

// refresh records rel as the host has it now (gone: forgotten). In a carried workspace the
// host's file is then the sandbox's too (apply wrote it), so it gets its digest: the path is
// as carried again, and a later host edit is sbx sync's to send.
func (m manifest) refresh(l Layers, rel string) {
	p := filepath.Join(l.Lower, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if err != nil {
		delete(m, rel)
		return
	}
	e := entryOf(rel, fi)
	if l.Carried {
		switch {
		case fi.Mode().Type() == fs.ModeSymlink:
			if target, err := os.Readlink(p); err == nil {
				e.Hash = digest(strings.NewReader(target))
			}
		case fi.Mode().IsRegular():
			if f, err := os.Open(p); err == nil {
				e.Hash = digest(f)
				f.Close()
			}
		}
	}
	m[rel] = e
}
