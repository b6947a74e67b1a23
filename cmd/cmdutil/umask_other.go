//go:build !unix

package cmdutil

import "io/fs"

// processUmask is 0 where there is no umask: modes are kept as the archive gives them.
func processUmask() fs.FileMode { return 0 }
