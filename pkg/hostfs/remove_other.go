//go:build !linux

package hostfs

import (
	"os"
	"path/filepath"
)

// RemoveTree removes path with everything under it, or with contentsOnly only what is under
// it. Without the unix calls that refuse links on the way, it relies on os.RemoveAll, which
// does not follow them either.
func RemoveTree(path string, contentsOnly bool) error {
	if !contentsOnly {
		return os.RemoveAll(path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(path, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
