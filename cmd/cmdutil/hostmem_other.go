//go:build !linux

package cmdutil

// hostMemory is unknown here: limits.memory keeps its default.
func hostMemory() int64 { return 0 }
