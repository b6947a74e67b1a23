//go:build !unix

package sandbox

import (
	"context"
	"os"
)

// flockFile only opens the file where flock is missing: leases and the admission lock do not
// exclude anything there, so maxRunning is enforced per process only.
func flockFile(_ context.Context, path string, _, _ bool) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
