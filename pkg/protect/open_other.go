//go:build !unix

package protect

import "os"

// Without O_NOFOLLOW the callers' Lstat checks are all there is.
func openDirNoFollow(name string) (*os.File, error) { return os.Open(name) }

func openFileNoFollow(name string) (*os.File, error) { return os.Open(name) }
