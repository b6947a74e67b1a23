// Package shim is the agent's helper that starts a command: the sbx binary started again by
// the agent (pkg/agent/agentd) with Mode as its first argument, in the command's session,
// with its stdio and environment. It sets what Go cannot set between fork and exec (the
// command is a child subreaper), then execs the command in place, so the command keeps the
// pid the agent knows.
//
// It runs from this package's init, before the rest of sbx is initialised: Go initialises
// packages in the order of their import paths as far as their imports allow, and this one
// imports only the standard library and x/sys, so a command's start does not wait for the
// CLI's packages (their regular expressions and tables) to be set up.
package shim

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mode is the first argument that makes the sbx binary the shim.
const Mode = "__agent-shim"

// Report is the descriptor the shim reports a failed exec on: errno\0text. The exec closes
// it, so the agent reads an end of file when the command started.
const Report = 3

func init() {
	if len(os.Args) > 1 && os.Args[1] == Mode {
		os.Exit(run(os.Args[2:]))
	}
}

// run takes "1" to make the command a child subreaper (else "0"), "--" and the command, and
// execs it as execvpe(3) would, looking it up in the PATH of its environment. It returns
// only when the command cannot start, with the code to exit with.
func run(args []string) int {
	unix.CloseOnExec(Report)
	if len(args) < 3 || args[1] != "--" {
		return report(0, "the agent's shim was started without a command")
	}
	if args[0] == "1" {
		// What the command orphans comes back to it, not to init, and stays its descendant:
		// the agent ends it with the command (see agentd).
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	argv := args[2:]
	err := execvpe(argv[0], argv, os.Environ())
	if errno, ok := err.(syscall.Errno); ok {
		return report(errno, errno.Error())
	}
	return report(0, err.Error())
}

func report(errno syscall.Errno, text string) int {
	_, _ = unix.Write(Report, fmt.Appendf(nil, "%d\x00%s", int(errno), text))
	return 127
}

// execvpe execs file as execvpe(3) does: a name with a slash as it is, else from the first
// of PATH's directories (/bin:/usr/bin without PATH) that holds it; it returns the first
// error other than a missing file, else the last.
func execvpe(file string, argv, env []string) error {
	if strings.Contains(file, "/") {
		return syscall.Exec(file, argv, env)
	}
	path := "/bin:/usr/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var saved error
	last := error(syscall.ENOENT)
	for _, dir := range strings.Split(path, ":") {
		full := file
		if dir != "" {
			full = dir + "/" + file
		}
		last = syscall.Exec(full, argv, env)
		if last != syscall.ENOENT && last != syscall.ENOTDIR && saved == nil {
			saved = last
		}
	}
	if saved != nil {
		return saved
	}
	return last
}
