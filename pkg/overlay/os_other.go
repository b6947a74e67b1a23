//go:build !linux

package overlay

import (
	"fmt"
	"runtime"
)

// Supported says whether sbx can keep an overlay workspace on this system: the layers are
// directories of this machine mounted by Linux's overlayfs, and the calls that read and
// change them without following a link (O_PATH, /proc/self/fd) are Linux's.
func Supported() error {
	return fmt.Errorf("workspace overlay is not supported on %s: it needs Linux, whose overlayfs mounts the layers on this machine", runtime.GOOS)
}

// chmodAt would set the mode of name in d without following a link, which needs O_PATH.
func chmodAt(int, string, uint32) error { return Supported() }

// mkWhiteout would make a whiteout, which only Linux's overlayfs reads.
func mkWhiteout(int, string) error { return Supported() }
