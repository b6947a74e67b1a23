//go:build unix

package sandbox

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// locksExclude says flockFile's locks exclude other processes here.
const locksExclude = true

// flockFile opens (creating) path and takes a flock on it: shared or exclusive. With wait it
// polls until it gets the lock or ctx ends; without, it returns errLocked at once when
// someone else holds a conflicting lock. The kernel drops the lock when the file is closed,
// also when the process dies, so a killed sbx never leaves a lock behind.
func flockFile(ctx context.Context, path string, exclusive, wait bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return f, nil
		case !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			f.Close()
			return nil, err
		case !wait:
			f.Close()
			return nil, errLocked
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// unheld reports whether the file at path exists and nobody holds a lock on it. It never
// creates the file, nor keeps a lock.
func unheld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
