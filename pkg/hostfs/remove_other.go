//go:build !linux

package hostfs

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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

// RemoveAt would remove name in the directory dirfd without following a link; only an
// overlay workspace's upper layer, which needs Linux, is removed that way.
func RemoveAt(_ int, _, path string) error {
	return fmt.Errorf("removing %s: not supported on %s, which has no overlay workspace", path, runtime.GOOS)
}
