package overlay

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Supported says whether sbx can keep an overlay workspace on this system: on Linux it can.
func Supported() error { return nil }

// chmodAt sets the mode of name in d without following a link.
func chmodAt(d int, name string, mode uint32) error {
	fd, err := unix.Openat(d, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil // a link has no mode of its own
	}
	return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode)
}

// mkWhiteout makes name in d a whiteout, as overlayfs marks a deletion: a character device
// 0/0, which Linux lets any user make (since 5.8).
func mkWhiteout(d int, name string) error { return unix.Mknodat(d, name, unix.S_IFCHR, 0) }
