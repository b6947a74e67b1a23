//go:build !linux

package engine

import "syscall"

// sshProcAttr leaves ssh's process attributes to the system off Linux.
func sshProcAttr() *syscall.SysProcAttr { return nil }
