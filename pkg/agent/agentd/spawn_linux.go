package agentd

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent/shim"

	"golang.org/x/sys/unix"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// env is the environment of a command: the agent's, TERM with a terminal, then the
// request's K=V variables over them.
func (s *server) env(tty bool, vars []string) []string {
	env := make([]string, 0, len(s.opts.Env)+len(vars)+1)
	at := map[string]int{}
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			env[i] = kv
			return
		}
		at[k] = len(env)
		env = append(env, kv)
	}
	for _, kv := range s.opts.Env {
		set(kv)
	}
	if _, ok := at["TERM"]; tty && !ok {
		set("TERM=xterm")
	}
	for _, kv := range vars {
		if !strings.Contains(kv, "=") {
			kv += "="
		}
		set(kv)
	}
	return env
}

// spawnError is a command that could not start, as the F frame's body says it.
type spawnError []byte

func (e spawnError) Error() string { return string(e) }

// spawnFailure is the F frame's body for err: errno\0text.
func spawnFailure(err error) []byte {
	var se spawnError
	if errors.As(err, &se) {
		return se
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Appendf(nil, "%d\x00%s", int(errno), errno.Error())
	}
	return fmt.Appendf(nil, "0\x00%s", err.Error())
}

// start runs argv with fds as its stdio in a new session (the terminal its controlling one
// with tty), a child subreaper with reap, and returns its pid. The command starts as the
// shim (the agent's own binary in shim.Mode), which sets what Go cannot set between
// fork and exec, then execs it in place: the pid is the command's. The shim reports a
// failed exec on a pipe that the exec closes.
func (s *server) start(argv, env []string, cwd string, fds [3]int, tty, reap bool) (int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, err
	}
	defer unix.Close(p[0])
	flag := "0"
	if reap {
		flag = "1"
	}
	args := append([]string{s.opts.Exe, shim.Mode, flag, "--"}, argv...)
	pid, err := syscall.ForkExec(s.opts.Exe, args, &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2]), uintptr(p[1])},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: tty, Ctty: 0},
	})
	unix.Close(p[1])
	if err != nil { // EAGAIN when the pids limit is full
		return 0, err
	}
	var msg []byte
	buf := make([]byte, 4096)
	for {
		var n int
		err := retry(func() (err error) { n, err = unix.Read(p[0], buf); return err })
		if err != nil || n == 0 {
			break
		}
		msg = append(msg, buf[:n]...)
	}
	if len(msg) > 0 {
		_ = retry(func() error { _, err := unix.Wait4(pid, nil, 0, nil); return err })
		return 0, spawnError(msg)
	}
	return pid, nil
}
