//go:build unix

package protect

import (
	"os"
	"syscall"
)

// openDirNoFollow opens a directory, failing on a link in its last component.
func openDirNoFollow(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
}

// openFileNoFollow opens a file for reading, failing on a link in its last component.
func openFileNoFollow(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}
