package engine

import "syscall"

// sshProcAttr puts ssh in a process group of its own, so the terminal's Ctrl-C reaches sbx,
// which then ends its commands through the connection, rather than ssh, which would cut it;
// and ends ssh with sbx.
func sshProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
