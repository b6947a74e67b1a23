package agentd

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent/shim"

	"golang.org/x/sys/unix"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// env is the environment of a command: the agent's, TERM with a terminal, then the
// request's K=V variables over them, and Options.Path at the end of PATH.
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
	if dir := s.opts.Path; dir != "" {
		path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		if i, ok := at["PATH"]; ok {
			path = strings.TrimPrefix(env[i], "PATH=")
		}
		if !slices.Contains(strings.Split(path, ":"), dir) {
			if path != "" {
				dir = path + ":" + dir
			}
			set("PATH=" + dir)
		}
	}
	return env
}

// spawnError is a command that could not start, as the F frame's body says it.
type spawnError []byte

func (e spawnError) Error() string { return string(e) }

// spawnFailure is the F frame's body for err: errno\0text (with \0exec from the shim).
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

// oomKills is how often the kernel's OOM killer fired in the sandbox's cgroup, or -1 when
// the count cannot be read.
func oomKills() int {
	for _, f := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
				if n, err := strconv.Atoi(v); err == nil {
					return n
				}
			}
		}
		return -1
	}
	return -1
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
		return 0, spawnError(append(msg, "\x00exec"...))
	}
	return pid, nil
}
