//go:build !unix

package config

import "errors"

func fileOwner(string) (int, int, error) {
	return 0, 0, errors.New("file owners are not known on this system")
}
