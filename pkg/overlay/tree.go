package overlay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// maxDirEntries bounds one directory's listing in either layer.
const maxDirEntries = 1_000_000

// openDir opens the directory rel under the directory root (a descriptor), one component at a
// time, following no link: a component that is a link fails with ELOOP.
func openDir(root int, rel string) (int, error) {
	fd, err := unix.Openat(root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "" || rel == "." {
		return fd, nil
	}
	for _, c := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// openPath opens the directory at path, which sbx names itself (the project root, the upper
// layer), following no link in its last component.
func openPath(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// roots opens the upper layer and the project, following no link in their last component.
func (l Layers) roots() (up, low int, err error) {
	if up, err = openPath(l.Upper()); err != nil {
		return -1, -1, err
	}
	if low, err = openPath(l.Lower); err != nil {
		unix.Close(up)
		return -1, -1, err
	}
	return up, low, nil
}

// inDir opens the directory of rel under root without following a link and calls op with
// it and rel's last component.
func inDir(root int, rel string, op func(d int, base string) error) error {
	dir, base := split(rel)
	d, err := openDir(root, dir)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	return op(d, base)
}

// names lists the directory dirfd, sorted, at most maxDirEntries.
func names(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	var out []string
	for {
		batch, err := f.Readdirnames(1024)
		out = append(out, batch...)
		if len(out) > maxDirEntries {
			return nil, fmt.Errorf("more than %d entries in one directory", maxDirEntries)
		}
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	return out, nil
}

// lstatAt is fstatat without following a link; ok is false when name does not exist.
func lstatAt(dirfd int, name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return st, false, nil
	}
	return st, err == nil, err
}

// openFile opens the regular file name in dirfd for reading, following no link; a FIFO or
// device swapped in since it was looked at is refused rather than waited on. In the upper
// layer (upper), a file the sandbox made unreadable (0000, 0200) is read as its owner can:
// given the owner's read bit for the moment it is opened, then its mode back, as the 0500
// directories removeUpper changes. The project's files are never re-moded.
func openFile(dirfd int, name string, upper bool) (*os.File, error) {
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if errors.Is(err, unix.EACCES) && upper {
		fd, err = openUnreadable(dirfd, name, flags)
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is no longer a regular file", name)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// openUnreadable opens name in dirfd, a regular file of sbx's user without the owner's read
// bit, by adding that bit for the moment it is opened.
func openUnreadable(dirfd int, name string, flags int) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o400 != 0 {
		return -1, unix.EACCES
	}
	if err := chmodAt(dirfd, name, perm(st)|0o400); err != nil {
		return -1, err
	}
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if rerr := chmodAt(dirfd, name, perm(st)); err == nil && rerr != nil {
		unix.Close(fd)
		return -1, rerr
	}
	return fd, err
}

// readLink reads the target of the link name in dirfd, at most 4 KiB.
func readLink(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		return "", fmt.Errorf("link %s: target too long", name)
	}
	return string(buf[:n]), nil
}

func isWhiteout(st unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// isOpaque says whether the upper directory name in dirfd hides the lower one: overlayfs
// marks it with user.overlay.opaque under userxattr, else trusted.overlay.opaque (readable
// only with privilege, so a non-root reader sees it only in the user namespace).
func isOpaque(dirfd int, name string) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	buf := make([]byte, 8)
	for _, attr := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		if n, err := unix.Fgetxattr(fd, attr, buf); err == nil && n >= 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

func kindOf(st unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return KindFile
	case unix.S_IFDIR:
		return KindDir
	case unix.S_IFLNK:
		return KindSymlink
	}
	return ""
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// split returns the directory and base of the project path rel.
func split(rel string) (string, string) {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i], rel[i+1:]
	}
	return "", rel
}
