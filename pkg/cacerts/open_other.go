//go:build !unix

package cacerts

import (
	"io/fs"
	"os"
	"path/filepath"
)

// openEntry opens name in the directory dir for reading; p names it in errors. Without
// openat and O_NOFOLLOW a link is refused by looking first, which a swap can race.
func openEntry(dir *os.File, p, name string, noFollow bool) (*os.File, error) {
	full := filepath.Join(dir.Name(), name)
	if noFollow {
		if fi, err := os.Lstat(full); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, &linkError{link: p}
		}
	}
	return os.Open(full)
}
