//go:build !unix

package config

// lockFile is a no-op where flock does not exist; the store is still written atomically.
func lockFile(string) (func(), error) { return func() {}, nil }
