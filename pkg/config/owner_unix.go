//go:build unix

package config

import (
	"fmt"
	"os"
	"syscall"
)

func fileOwner(path string) (int, int, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("%s: no owner information", path)
	}
	return int(st.Uid), int(st.Gid), nil
}

func lstatOwnership(path string) (Ownership, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return Ownership{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Ownership{}, fmt.Errorf("%s: no owner information", path)
	}
	return Ownership{UID: int(st.Uid), Mode: fi.Mode()}, nil
}
