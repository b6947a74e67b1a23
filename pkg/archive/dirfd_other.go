//go:build !unix

package archive

import (
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// renameAt moves oldName in from to newName in to. Without renameat this goes by path,
// which a swapped directory could redirect; sbx runs sandboxes only on Linux.
func renameAt(from *hostDir, oldName string, to *hostDir, newName string) error {
	return os.Rename(filepath.Join(from.path, oldName), filepath.Join(to.path, newName))
}

// setDirAttrs gives the directory name in d its mode and, when set, its times.
func setDirAttrs(d *hostDir, name string, mode fs.FileMode, mtime time.Time) error {
	if err := d.root.Chmod(name, mode); err != nil {
		return err
	}
	if mtime.IsZero() {
		return nil
	}
	return d.root.Chtimes(name, mtime, mtime)
}

// claim does nothing where flock is missing: leftovers of killed copies stay.
func claim(*hostDir) {}
