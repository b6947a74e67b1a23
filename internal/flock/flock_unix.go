//go:build unix

// Package flock holds sbx's file locks: flock(2) on a file in sbx's state directory, which
// the kernel drops when the file is closed or its process dies, so a killed sbx never leaves
// a lock behind. Leases, the admission lock, claims and the trust store all take theirs here.
package flock

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// ErrLocked is a lock someone else holds, for Open without wait.
var ErrLocked = errors.New("held by another process")

// Excludes says Open's locks exclude other processes here.
const Excludes = true

// Open opens (creating) path and takes a flock on it: shared or exclusive. With wait it
// polls until it gets the lock or ctx ends; without, it returns ErrLocked at once when
// someone else holds a conflicting lock. The kernel drops the lock when the file is closed,
// also when the process dies, so a killed sbx never leaves a lock behind.
func Open(ctx context.Context, path string, exclusive, wait bool) (*os.File, error) {
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
			return nil, ErrLocked
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Unheld reports whether the file at path exists and nobody holds a lock on it. It never
// creates the file, nor keeps a lock.
func Unheld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
