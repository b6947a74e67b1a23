//go:build unix

package archive

import (
	"io/fs"
	"syscall"
)

const (
	ownerSupported = true
	openNonblock   = syscall.O_NONBLOCK
)

func fileOwner(fi fs.FileInfo) (uid, gid int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}
