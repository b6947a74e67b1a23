//go:build !unix

package flock

import (
	"context"
	"errors"
	"os"
)

// ErrLocked is a lock someone else holds; never returned here.
var ErrLocked = errors.New("held by another process")

// Excludes says Open's locks exclude nothing here: no lock tells a live sbx from a
// dead one, so nothing may be taken for abandoned.
const Excludes = false

// Open only opens the file where flock is missing: leases and the admission lock do not
// exclude anything there, so maxRunning is enforced per process only.
func Open(_ context.Context, path string, _, _ bool) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// Unheld cannot tell a held file here.
func Unheld(string) bool { return false }
