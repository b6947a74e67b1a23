//go:build !unix

package config

import (
	"errors"
	"os"
)

func fileOwner(string) (int, int, error) {
	return 0, 0, errors.New("file owners are not known on this system")
}

// lstatOwnership reports every path as the current user's: there are no owners to check.
func lstatOwnership(path string) (Ownership, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return Ownership{}, err
	}
	return Ownership{UID: os.Geteuid(), Mode: fi.Mode()}, nil
}
