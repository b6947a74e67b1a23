// Package hostfs removes trees that a sandbox may have written on the host (its agent
// directory, an overlay's upper layer) without following a link out of them, whatever modes
// the sandbox gave what it wrote.
package hostfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RemoveTree removes path with everything under it, or with contentsOnly only what is under
// it. It never follows a link: each directory is opened from its parent's descriptor without
// following one, and what is in it is removed through that descriptor, so nothing outside
// path is touched whatever was planted in it. Each directory is made readable, writable and
// searchable by its owner before it is emptied, so a tree that a sandbox left with modes
// 0555 or 0000 (in the agent directory of an older sbx) goes as well; only what another
// user owns can resist, when sbx does not run as root.
func RemoveTree(path string, contentsOnly bool) error {
	parent, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(parent)
	if !contentsOnly {
		return RemoveAt(parent, filepath.Base(path), path)
	}
	dir, err := unix.Openat(parent, filepath.Base(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(dir)
	return emptyDir(dir, path)
}

// RemoveAt removes name, with everything under it, in the directory dirfd, following no
// link; path names it in errors.
func RemoveAt(dirfd int, name, path string) error {
	dir, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		// Not a directory, or a link (removed, never followed).
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "unlink", Path: path, Err: err}
		}
		return nil
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	// Through the descriptor, so it is this directory whatever happens to the name. When
	// another user owns it this fails, and so may what follows.
	if unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", dir), 0o700) != nil {
		_ = unix.Fchmodat(dirfd, name, 0o700, 0)
	}
	err = emptyDir(dir, path)
	unix.Close(dir)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: path, Err: err}
	}
	return nil
}

// emptyDir removes everything in the directory dir (an O_PATH descriptor).
func emptyDir(dir int, path string) error {
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	var first error
	for _, n := range names {
		if err := RemoveAt(dir, n, filepath.Join(path, n)); err != nil && first == nil {
			first = err
		}
	}
	return first
}
