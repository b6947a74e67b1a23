//go:build unix

package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sbx-sandbox/sbx/pkg/archive"
)

// claimHostDir removes the staging directories that killed copies left in the host directory
// dir, and returns a function that ends the claim. Every sbx copying into dir holds a shared
// lock on it; only a process that gets the lock exclusively, so that no copy is running
// there, removes anything, so a live copy's staging directory is never taken for a leftover.
func claimHostDir(dir string) func() {
	f, err := os.Open(dir)
	if err != nil {
		return func() {}
	}
	fd := int(f.Fd())
	if syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		removeLeftovers(dir)
	}
	_ = syscall.Flock(fd, syscall.LOCK_SH)
	return func() { f.Close() }
}

func removeLeftovers(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), archive.StagingPrefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if os.RemoveAll(p) != nil {
			// A copy killed while applying modes may have left directories without write
			// permission.
			_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					_ = os.Chmod(q, 0o700)
				}
				return nil
			})
			_ = os.RemoveAll(p)
		}
	}
}
