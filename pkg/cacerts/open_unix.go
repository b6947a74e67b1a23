//go:build unix

package cacerts

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// openEntry opens name in the directory dir for reading; p names it in errors. With noFollow a
// link there is a *linkError rather than followed. O_NONBLOCK keeps a FIFO from holding sbx up.
func openEntry(dir *os.File, p, name string, noFollow bool) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC
	if noFollow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat(int(dir.Fd()), name, flags, 0)
	if noFollow && (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EMLINK)) {
		return nil, &linkError{link: p}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}
