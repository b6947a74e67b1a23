//go:build !unix

package sandbox

import (
	"context"
	"os"
)

// locksExclude says flockFile's locks exclude nothing here: no lock tells a live sbx from a
// dead one, so nothing may be taken for abandoned.
const locksExclude = false

// flockFile only opens the file where flock is missing: leases and the admission lock do not
// exclude anything there, so maxRunning is enforced per process only.
func flockFile(_ context.Context, path string, _, _ bool) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// unheld cannot tell a held file here.
func unheld(string) bool { return false }
