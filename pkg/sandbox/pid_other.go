//go:build !linux

package sandbox

import "errors"

func sandboxPid(int) (int, string, error) {
	return 0, "", errors.New("only Linux shows a process's pid in its sandbox")
}
