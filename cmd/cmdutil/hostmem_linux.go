package cmdutil

import (
	"sync"
	"syscall"
)

// hostMemory is this machine's memory in bytes, which caps limits.memory's default.
var hostMemory = sync.OnceValue(func() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
})
