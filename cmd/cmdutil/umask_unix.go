//go:build unix

package cmdutil

import (
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// processUmask is the umask sbx was started with. Linux (4.7 and later) reports it in
// /proc/self/status. Elsewhere the only way is to set it and put it back; a file created
// meanwhile by another goroutine gets the stricter 077, never a looser mode.
func processUmask() fs.FileMode {
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return fs.FileMode(n) & fs.ModePerm
				}
			}
		}
	}
	old := syscall.Umask(0o077)
	syscall.Umask(old)
	return fs.FileMode(old) & fs.ModePerm
}
