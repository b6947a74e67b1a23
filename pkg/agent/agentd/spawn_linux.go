package agentd

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// the count cannot be read. It is read before and after every command, without the poller
// os.ReadFile registers a cgroup file with.
func oomKills() int {
	for _, f := range oomFiles() {
		fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var buf [1024]byte
		n, _ := unix.Read(fd, buf[:])
		unix.Close(fd)
		for line := range strings.Lines(string(buf[:max(n, 0)])) {
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

// oomFiles are where cgroup v2, then v1, count OOM kills; the first that exists is the one.
var oomFiles = sync.OnceValue(func() []string {
	all := []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}
	for i, f := range all {
		if unix.Access(f, unix.R_OK) == nil {
			return all[i : i+1]
		}
	}
	return all
})

// start runs argv with fds as its stdio in a new session (the terminal its controlling one
// with tty), a child subreaper with reap, and returns its pid. The command starts as the
// shim (the agent's own binary in shim.Mode), which sets what Go cannot set between
// fork and exec, then execs it in place: the pid is the command's. The shim was mostly
// started ahead, as the spare, so that a command does not wait for a Go runtime to start
// (10 ms here, 100 ms under gVisor's ptrace platform); without one, or for a command line
// too long for its request, it starts now. The shim reports a failed start on a descriptor
// that the exec closes. announce gets the pid before the command runs (see started).
func (s *server) start(argv, env []string, cwd string, fds [3]int, tty, reap bool, announce func(pid int)) (int, error) {
	s.noSpare = false // worth another try (see loop)
	s.lastStart = s.now()
	s.later(spareAfter, func() {}) // wakes the loop to start the next spare
	req := shim.Request{Reap: reap, TTY: tty, Cwd: cwd, Argv: argv, Env: env}.Encode()
	if sp := s.spare; sp != nil && len(req) <= shim.MaxRequest {
		s.spare = nil
		err := sp.ready()
		if err == nil {
			err = retry(func() error {
				return unix.Sendmsg(sp.ctl, req, unix.UnixRights(fds[:]...), nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			})
		}
		if err == nil {
			if err := s.started(sp.pid, sp.ctl, false, announce); err != nil {
				return 0, err
			}
			return sp.pid, nil
		}
		// Gone (something in the sandbox may kill it): start the usual way.
		s.logf("the spare shim %d took no request: %v", sp.pid, err)
		s.dropSpare(sp)
	}
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	flag := "0"
	if reap {
		flag = "1"
	}
	args := append([]string{s.exe(), shim.Mode, flag, "--"}, argv...)
	pid, err := syscall.ForkExec(s.opts.Exe, args, &syscall.ProcAttr{
		Dir:   cwd,
		Env:   append(env[:len(env):len(env)], shim.Marker),
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2]), uintptr(p[1])},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: tty, Ctty: 0},
	})
	unix.Close(p[1])
	if err != nil { // EAGAIN when the pids limit is full
		unix.Close(p[0])
		return 0, err
	}
	if err := s.started(pid, p[0], true, announce); err != nil {
		return 0, err
	}
	return pid, nil
}

// started follows shim pid's start on fd, a SOCK_SEQPACKET socket, which it closes: it
// reads shim.Ready (unless the caller did), calls announce, tells the shim to exec the command
// (shim.Go), then reads nothing once the exec closed the shim's end, or why the command did
// not start, after which the shim is reaped. A shim that ended before Ready never ran the
// command: a Go runtime that cannot make its threads exits 2 (the pids limit is full).
// The command runs only after announce: one that stops the agent at once (SIGSTOP) must find
// sbx knowing its pid already, to end it at its timeout.
func (s *server) started(pid, fd int, ready bool, announce func(pid int)) error {
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	next := func() []byte {
		var n int
		if err := retry(func() (err error) { n, err = unix.Read(fd, buf); return err }); err != nil {
			return nil
		}
		return buf[:max(n, 0)]
	}
	if ready && string(next()) != shim.Ready {
		var ws unix.WaitStatus
		_ = retry(func() error { _, err := unix.Wait4(pid, &ws, 0, nil); return err })
		if ws.Signaled() {
			return spawnError(fmt.Appendf(nil, "0\x00the agent's shim was killed (%v) before it started the command", ws.Signal()))
		}
		return unix.EAGAIN
	}
	announce(pid)
	// A shim that already failed (its report waits below) or was killed takes nothing.
	_ = retry(func() error { return unix.Sendmsg(fd, []byte(shim.Go), nil, nil, unix.MSG_NOSIGNAL) })
	msg := next()
	if len(msg) == 0 {
		return nil
	}
	_ = retry(func() error { _, err := unix.Wait4(pid, nil, 0, nil); return err })
	return spawnError(bytes.Clone(msg))
}

// spare is a shim started ahead of the next command (shim.Spare), waiting on ctl.
type spare struct {
	pid, ctl int
}

// spareAfter is how long after a command's start the next spare waits while commands run:
// most commands an agent serves in a row are short, and a spare's start (a vfork and exec,
// which the agent waits for) would delay their exit.
const spareAfter = 50 * time.Millisecond

// wantSpare says whether the loop should start a spare shim once nothing waits for it.
func (s *server) wantSpare() bool {
	return s.spare == nil && !s.noSpare && !s.stop && (len(s.jobs) == 0 || s.now().Sub(s.lastStart) >= spareAfter)
}

// ready waits until the spare says it waits for its request (it may still be starting), and
// fails if it ended first.
func (sp *spare) ready() error {
	buf := make([]byte, len(shim.Ready)+1)
	var n int
	err := retry(func() (err error) { n, err = unix.Read(sp.ctl, buf); return err })
	switch {
	case err != nil:
		return err
	case n == 0:
		return errors.New("it ended before it was ready")
	case string(buf[:n]) != shim.Ready:
		return fmt.Errorf("it said %q", buf[:n])
	}
	return nil
}

// refill starts a spare shim. Under a full pids limit or descriptor table it cannot; it
// tries again after the next command (which starts its shim itself).
func (s *server) refill() {
	s.noSpare = true
	if s.devNull < 0 {
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return
		}
		s.devNull = fd
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	null := uintptr(s.devNull)
	pid, err := syscall.ForkExec(s.opts.Exe, []string{s.exe(), shim.Mode, shim.Spare}, &syscall.ProcAttr{
		// One P: the spare runs no Go code worth a second thread, and each thread is a pid.
		Env:   []string{"GOMAXPROCS=1", shim.Marker},
		Files: []uintptr{null, null, null, uintptr(pair[1])},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	unix.Close(pair[1])
	if err != nil {
		unix.Close(pair[0])
		return
	}
	s.spare, s.noSpare = &spare{pid: pid, ctl: pair[0]}, false
}

// dropSpare ends sp and reaps it.
func (s *server) dropSpare(sp *spare) {
	unix.Close(sp.ctl)
	_ = unix.Kill(sp.pid, unix.SIGKILL)
	_ = retry(func() error { _, err := unix.Wait4(sp.pid, nil, 0, nil); return err })
}

// reapSpare reaps the spare shim if something ended it while it waited.
func (s *server) reapSpare() {
	if sp := s.spare; sp != nil {
		if pid, _ := unix.Wait4(sp.pid, nil, unix.WNOHANG, nil); pid == sp.pid {
			unix.Close(sp.ctl)
			s.spare = nil
		}
	}
}

// exe is the name the shims run under: the agent's binary as the sandbox sees it.
func (s *server) exe() string {
	if s.opts.Name != "" {
		return s.opts.Name
	}
	return s.opts.Exe
}
