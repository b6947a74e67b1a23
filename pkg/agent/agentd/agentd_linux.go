// Package agentd is sbx's in-sandbox agent: the sbx binary, mounted read-only into a sandbox
// and run as its main process (under docker's init), so every Linux image gets one whatever
// it holds (no interpreter, no libc). It accepts connections on a Unix socket that sbx made
// on the host and handed over, and runs each request as a child process whose stdio it
// relays over the connection, so a command starts without the engine's exec path
// (containerd-shim plus runc exec, ~100 ms). It runs as the sandbox user under the
// sandbox's limits, so its children are confined exactly as an exec would be. One goroutine
// serves every connection from one epoll loop over raw descriptors, and the agent forks only
// to run a request.
//
// The protocol (sockets, frames, the request, strict modes, limits and errors) is written
// once, in pkg/agent/PROTOCOL.md; the frame types, strict modes and bounds are pkg/agent's
// constants, shared with the client. The socket's directory (Dir) is mounted read-only, so
// nothing in the sandbox can store a byte there, the agent included: sbx binds the listening
// socket on the host and passes it over handoff.sock, the one socket the agent connects to
// (connecting needs no write access). Under gVisor, which cannot accept on a listener made
// on the host, the directory is mounted read-write and the agent binds the socket itself
// (agent.OwnSocket).
//
// Ending a command: TERM to what belongs to it, then KILL after the grace period to what
// still does. What belongs to it is its process group and session (the command starts as
// their leader, and the agent reaps it only once it is done with them, so their IDs cannot
// be reused meanwhile), every descendant of those by parent links, and what got TERM. With
// reap 1 the command is a child subreaper (PR_SET_CHILD_SUBREAPER, kept across execve: Go
// has no hook between fork and exec, so the agent starts itself as a shim that sets it and
// then execs the command), so what its processes orphan while it runs, setsid and double
// fork included, comes back to it instead of to init and stays its descendant. The agent
// ends a command at its timeout (sending T first), on K, and when the command's main
// process exits (whatever is left). At the KILL it stops what belongs to the command first
// (SIGSTOP, until nothing new shows up), so nothing forks away between the look and the
// kill. It reports Z at most KillDrain after the KILL, or ExitDrain after what was left at
// the exit is gone, even when processes it cannot attribute still hold the command's output
// open; it then stops reading it. A client that goes away ends the command as its strict
// mode says (PROTOCOL.md). With reap 0 (sbx's own launchers of background processes and
// shell sessions, which start processes meant to outlive the exec) the command is no
// subreaper, and ending it, on K or for a client gone, only sends TERM to its process group.
//
// A relay (a C request instead of R) runs no command: the agent connects to a port on the
// sandbox's loopback and moves bytes both ways, with the same bounds as a command's stdio
// (reading stops while High bytes wait on either side), so a port forward needs no engine
// port publishing and works with no network at all.
package agentd

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/sbx-sandbox/sbx/pkg/agent"

	"golang.org/x/sys/unix"
)

const (
	handoffWait = 30 * time.Second       // sbx sends the listener as soon as it accepts
	pollEvery   = 200 * time.Millisecond // between looks at what is left of a command being ended
	// KillDrain is how long output may still come after the KILL before Z.
	KillDrain = 200 * time.Millisecond
	// ExitDrain is how long others may hold output open after the command and its group ended.
	ExitDrain = time.Second
)

// Options are what the agent takes from its process.
type Options struct {
	Dir      string        // the agent's directory: handoff.sock, idle.lock
	IdleStop time.Duration // 0: never (PROTOCOL.md, "Idle stop")
	Env      []string      // the environment commands start from
	Stderr   io.Writer     // the agent's log
	Now      func() time.Time
	Exe      string // the binary the shim runs from: the agent's own
	Name     string // the shim's argv[0]: the binary's path in the sandbox ("": Exe)
	// Path is a directory every command's PATH ends with, after the request's variables.
	Path string
	// OwnSocket makes the agent bind Dir/agent.sock itself (agent.OwnSocket) rather than
	// take the listener sbx hands over.
	OwnSocket bool
	// Forward, "ADDR:PORT=SOCKET", relays connections to ADDR:PORT to SOCKET (agent.Forward).
	Forward string
}

// Main runs the agent with the arguments after agent.Mode (agent.OwnSocket or not, the
// directory, idleStop in milliseconds, and a directory for PATH: agent.Cmd) and returns its
// exit code: 0 once it stopped the sandbox for idleness.
func Main(args []string, env []string, stderr io.Writer, now func() time.Time) int {
	opts := Options{Env: env, Stderr: stderr, Now: now, Exe: "/proc/self/exe"}
	if name, err := os.Executable(); err == nil {
		opts.Name = name
	}
	if len(args) > 0 && args[0] == agent.OwnSocket {
		opts.OwnSocket, args = true, args[1:]
	}
	if len(args) > 0 && strings.HasPrefix(args[0], agent.Forward) {
		opts.Forward, args = strings.TrimPrefix(args[0], agent.Forward), args[1:]
	}
	if len(args) < 1 || len(args) > 3 {
		fmt.Fprintln(stderr, "sbx-agent: usage: sbx "+agent.Mode+" ["+agent.OwnSocket+"] ["+agent.Forward+"ADDR:PORT=SOCKET] DIR [IDLE_STOP_MS [PATH_DIR]]")
		return 2
	}
	opts.Dir = args[0]
	if len(args) == 3 {
		opts.Path = args[2]
	}
	if len(args) >= 2 {
		ms, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil || ms < 0 {
			fmt.Fprintf(stderr, "sbx-agent: idleStop %q is not a number of milliseconds\n", args[1])
			return 2
		}
		opts.IdleStop = time.Duration(ms) * time.Millisecond
	}
	if err := Run(opts); err != nil {
		fmt.Fprintf(stderr, "sbx-agent: %v\n", err)
		return 1
	}
	return 0
}

// handler is what the loop calls for events on a descriptor; conn, when set, is the
// connection whose failure it is.
type handler struct {
	fn   func(events uint32) error
	conn *conn
}

type timer struct {
	due time.Time
	fn  func() // nil once cancelled or run
}

type server struct {
	opts      Options
	ep        int
	epFile    *os.File // ep, kept for the agent's life: its finalizer would close ep
	epPolled  bool     // epFile is in the runtime's poller (see wait)
	handlers  map[int]handler
	jobs      map[int]*job // by pid, until the agent reaps the command
	timers    []*timer
	mypid     int
	clients   map[*conn]bool // open connections, but for status queries
	idleSince time.Time      // the last time the sandbox was seen in use
	lst       int            // the listener, or -1
	accepting bool
	idleLock  int
	wakeR     int
	scratch   []byte    // one output read, with room for its frame header
	stop      bool      // the sandbox was idle for IdleStop: the agent exits
	spare     *spare    // the shim for the next command, or nil
	noSpare   bool      // the last start of a spare failed
	lastStart time.Time // of a command
	devNull   int       // the spare's stdio until its command's, or -1
}

// Run serves until the sandbox was idle for opts.IdleStop; it returns an error only when
// the agent cannot run at all.
func Run(opts Options) error {
	s := &server{opts: opts, handlers: map[int]handler{}, jobs: map[int]*job{}, clients: map[*conn]bool{},
		mypid: unix.Getpid(), lst: -1, idleLock: -1, devNull: -1, scratch: make([]byte, 5+agent.Chunk)}
	s.idleSince = s.now()
	// The agent's environment is the sandbox's, which may tune Go for its own programs
	// (GOGC=off): the agent keeps the runtime's defaults.
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	// One loop does all the work: one P means no second thread spinning for work, so the
	// runtime needs fewer threads (each a pid a fork bomb may have taken).
	runtime.GOMAXPROCS(1)
	// The runtime starts its poller (an epoll and an eventfd) with the first timer, and dies
	// if it cannot get the descriptors: start it now, not once a command took them all.
	time.AfterFunc(time.Hour, func() {}).Stop()
	var err error
	if s.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	s.pollEpoll()
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("a pipe for signals: %w", err)
	}
	s.wakeR = wake[0]
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	go func() {
		for range sigs {
			_, _ = unix.Write(wake[1], []byte{0}) // full: a wakeup is pending anyway
		}
	}()
	s.watch(s.wakeR, unix.EPOLLIN, handler{fn: s.reap})
	if opts.Forward != "" {
		// Before any command can run: the sandbox's first request finds it listening.
		if _, err := forward(opts.Forward, s.logf); err != nil {
			return err
		}
	}
	warmThreads()
	if opts.OwnSocket {
		s.lst = s.bindListener()
	} else {
		s.lst = s.takeListener()
	}
	s.listen(true)
	if opts.IdleStop > 0 {
		// Linked by sbx before the start; read-only is enough for a flock.
		fd, err := unix.Open(filepath.Join(opts.Dir, "idle.lock"), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil { // without it a stop could come between sbx's check and its command
			s.logf("no idle.lock (%v); the sandbox will not stop for idleness", err)
		} else {
			s.idleLock = fd
			s.idleTick()
		}
	}
	return s.loop()
}

func (s *server) now() time.Time { return s.opts.Now() }

func (s *server) logf(format string, a ...any) {
	fmt.Fprintf(s.opts.Stderr, "sbx-agent: "+format+"\n", a...)
}

func (s *server) loop() error {
	events := make([]unix.EpollEvent, 64)
	for {
		wait := -1
		if d, ok := s.nextTimer(); ok {
			wait = int((d + time.Millisecond - 1) / time.Millisecond)
		}
		// A spare shim is started when nothing waits: its start (a vfork and exec) never
		// delays a command's frames.
		idle := s.wantSpare()
		if idle {
			wait = 0
		}
		n, err := s.wait(events, wait)
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("epoll_wait: %w", err)
		}
		if idle && n == 0 {
			s.refill()
		}
		for _, ev := range events[:max(n, 0)] {
			h, ok := s.handlers[int(ev.Fd)]
			if !ok {
				continue
			}
			if h.conn != nil {
				s.guard(h.conn, int(ev.Fd), func() error { return h.fn(ev.Events) })
				continue
			}
			if err := s.protect(func() error { return h.fn(ev.Events) }); err != nil {
				s.logf("%v", err) // not a connection's: log it and go on
			}
		}
		s.runTimers()
		if s.stop {
			return nil
		}
	}
}

// pollEpoll puts the agent's epoll in the runtime's poller, so that the loop waits there
// (wait) rather than in epoll_wait. Blocked in a system call, the loop would keep the only P
// (GOMAXPROCS 1) until sysmon took it back, up to 10 ms later, while the goroutine that turns
// a SIGCHLD into a wakeup needs that P: a command's exit reached sbx 1.5 ms late on average.
// Where the poller cannot take an epoll, the loop waits in epoll_wait.
func (s *server) pollEpoll() {
	if unix.SetNonblock(s.ep, true) != nil {
		return
	}
	s.epFile = os.NewFile(uintptr(s.ep), "epoll")
	if s.epPolled = s.epFile.SetReadDeadline(time.Time{}) == nil; !s.epPolled {
		s.logf("the runtime's poller cannot wait on an epoll here: the loop waits in epoll_wait")
	}
}

// wait returns the events on the agent's epoll within wait milliseconds (-1: no limit, 0:
// those ready now).
func (s *server) wait(events []unix.EpollEvent, wait int) (int, error) {
	if !s.epPolled || wait == 0 {
		return unix.EpollWait(s.ep, events, wait)
	}
	deadline := time.Time{}
	if wait > 0 {
		deadline = time.Now().Add(ms(wait)) // the poller's clock, not opts.Now
	}
	if err := s.epFile.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	raw, err := s.epFile.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	err = raw.Read(func(uintptr) bool {
		n, werr = unix.EpollWait(s.ep, events, 0)
		return n != 0 || werr != nil && werr != unix.EINTR
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return n, werr
}

// protect runs fn, turning a panic into an error: a bug costs what it was serving, never
// the agent, and so never the sandbox.
func (s *server) protect(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}

// protocolError is a frame the agent does not take: the connection is refused with its text.
type protocolError string

func (e protocolError) Error() string { return string(e) }

// guard runs a handler of c on descriptor fd (-1: none); a failure costs that connection,
// never the agent.
func (s *server) guard(c *conn, fd int, fn func() error) {
	err := s.protect(fn)
	if err == nil {
		return
	}
	var pe protocolError
	why := ""
	if errors.As(err, &pe) {
		why = string(pe)
	} else {
		s.logf("%v", err)
		why = "internal error: " + err.Error()
	}
	if err := s.protect(func() error { c.fail(why, fd); return nil }); err != nil {
		s.logf("dropping a connection: %v", err) // the last resort: at least the client learns
		c.close()
	}
}

func (s *server) later(d time.Duration, fn func()) *timer {
	t := &timer{due: s.now().Add(d), fn: fn}
	s.timers = append(s.timers, t)
	return t
}

func cancel(t *timer) {
	if t != nil {
		t.fn = nil
	}
}

// runTimers runs the timers that are due.
func (s *server) runTimers() {
	now := s.now()
	var due []*timer
	keep := s.timers[:0]
	for _, t := range s.timers {
		switch {
		case t.fn == nil:
		case !t.due.After(now):
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	clear(s.timers[len(keep):])
	s.timers = keep
	for _, t := range due {
		fn := t.fn
		if fn == nil { // cancelled by one that ran before it
			continue
		}
		t.fn = nil
		if err := s.protect(func() error { fn(); return nil }); err != nil {
			s.logf("%v", err)
		}
	}
}

// nextTimer is the time until the next timer is due.
func (s *server) nextTimer() (time.Duration, bool) {
	var next time.Time
	ok := false
	for _, t := range s.timers {
		if t.fn != nil && (!ok || t.due.Before(next)) {
			next, ok = t.due, true
		}
	}
	if !ok {
		return 0, false
	}
	return max(0, next.Sub(s.now())), true
}

func (s *server) watch(fd int, events uint32, h handler) {
	op := unix.EPOLL_CTL_ADD
	if _, ok := s.handlers[fd]; ok {
		op = unix.EPOLL_CTL_MOD
	}
	if err := unix.EpollCtl(s.ep, op, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)}); err != nil {
		panic(fmt.Errorf("watching descriptor %d: %w", fd, err))
	}
	s.handlers[fd] = h
}

func (s *server) unwatch(fd int) {
	if _, ok := s.handlers[fd]; ok {
		delete(s.handlers, fd)
		_ = unix.EpollCtl(s.ep, unix.EPOLL_CTL_DEL, fd, nil)
	}
}

func (s *server) closeFD(fd int) {
	unix.Close(fd)
	s.listen(true) // a descriptor is free again
}

// listen watches the listener, or stops: while the agent is out of descriptors a pending
// connection keeps it readable, and epoll would wake the agent for it at once, forever.
func (s *server) listen(on bool) {
	if s.lst < 0 || on == s.accepting {
		return
	}
	if on {
		s.watch(s.lst, unix.EPOLLIN, handler{fn: s.accept})
	} else {
		s.unwatch(s.lst)
	}
	s.accepting = on
}

func (s *server) accept(uint32) error {
	fd, _, err := unix.Accept4(s.lst, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	switch err {
	case nil:
	case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
		// The connection waits in the backlog until a descriptor is freed (or a second has
		// passed); sbx's client gives up on its greeting meanwhile and uses the engine's exec.
		s.listen(false)
		s.later(time.Second, func() { s.listen(true) })
		return nil
	default:
		return nil
	}
	if err := s.protect(func() error { newConn(s, fd); return nil }); err != nil {
		s.logf("a new connection: %v", err)
		s.unwatch(fd)
		unix.Close(fd)
	}
	return nil
}

// takeListener is the listening socket sbx made for this sandbox, received over
// Dir/handoff.sock, or -1 when nobody hands one over.
func (s *server) takeListener() int {
	fd, err := receiveListener(filepath.Join(s.opts.Dir, "handoff.sock"))
	if err != nil {
		s.logf("no socket from sbx (%v); commands will come through the engine's exec", err)
		return -1
	}
	return fd
}

// bindListener is agent.sock, bound in Dir by the agent itself (agent.OwnSocket), or -1 when
// it cannot be made. Under gVisor (runsc --host-uds=create) the socket appears in the host
// directory, where sbx dials it. It lets in every user (0666, as sbx's own handoff.sock):
// sbx may run as any host uid, and the private directory above keeps other host users out.
// The mode comes from the umask at bind: gVisor refuses chmod on a host socket (EPERM).
func (s *server) bindListener() int {
	fd, err := bindSocket(filepath.Join(s.opts.Dir, "agent.sock"))
	if err != nil {
		s.logf("cannot make agent.sock (%v); commands will come through the engine's exec", err)
		return -1
	}
	return fd
}

func bindSocket(path string) (int, error) {
	// What a previous run left; sbx empties the directory before a start, so this is a
	// restart it did not see (docker start).
	if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	// No command runs yet: nothing else makes a file while the umask is changed.
	old := unix.Umask(0o111)
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	unix.Umask(old)
	if err == nil {
		err = unix.Listen(fd, 128)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func receiveListener(path string) (_ int, err error) {
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(sock)
	tv := unix.NsecToTimeval(handoffWait.Nanoseconds())
	// A Unix socket's connect waits as long as its sends may.
	_ = unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	_ = unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := retry(func() error { return unix.Connect(sock, &unix.SockaddrUnix{Name: path}) }); err != nil {
		return -1, err
	}
	msg, oob := make([]byte, 16), make([]byte, unix.CmsgSpace(16))
	var n, oobn int
	err = retry(func() (err error) {
		n, oobn, _, _, err = unix.Recvmsg(sock, msg, oob, unix.MSG_CMSG_CLOEXEC)
		return err
	})
	if err != nil {
		return -1, err
	}
	var fds []int
	cmsgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range cmsgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if string(msg[:n]) != string(agent.FrameListener)+"\x00\x00\x00\x00" || len(fds) != 1 {
		return -1, fmt.Errorf("unexpected hand-off %q with %d descriptors", msg[:n], len(fds))
	}
	fd := fds[0]
	domain, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	listening, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err1 != nil || err2 != nil || domain != unix.AF_UNIX || listening != 1 {
		return -1, errors.New("the descriptor handed over is not a listening Unix socket")
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return -1, err
	}
	fds = nil
	return fd, nil
}

// retry runs a blocking call again when a signal (the runtime's preemption among them)
// interrupts it.
func retry(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// reap learns which commands exited. WNOWAIT: the zombie keeps the command's IDs until its
// job is done with them.
func (s *server) reap(uint32) error {
	var b [512]byte
	for {
		if n, _ := unix.Read(s.wakeR, b[:]); n <= 0 {
			break
		}
	}
	for _, j := range s.jobs {
		if j.exited {
			continue
		}
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, j.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
			continue
		}
		pid, status := sigchld(&info)
		if pid == 0 {
			continue
		}
		code := status
		if info.Code != cldExited {
			code += 128
		}
		s.guard(j.c, -1, func() error { j.exit(code); return nil })
	}
	s.reapSpare()
	if s.mypid == 1 { // without docker's init, orphans come to the agent
		for pid, e := range procs() {
			if e.ppid == 1 && e.state == "Z" && s.jobs[pid] == nil && (s.spare == nil || s.spare.pid != pid) {
				_, _ = unix.Wait4(pid, nil, unix.WNOHANG, nil)
			}
		}
	}
	return nil
}

// cldExited is siginfo's si_code for a child that exited (CLD_EXITED), not killed.
const cldExited = 1

// sigchld is the pid and status of a SIGCHLD siginfo: after three ints, in a union aligned
// as a pointer.
func sigchld(info *unix.Siginfo) (pid, status int) {
	const align = unsafe.Sizeof(uintptr(0))
	const off = (12 + align - 1) &^ (align - 1)
	base := unsafe.Pointer(info)
	return int(*(*int32)(unsafe.Add(base, off))), int(*(*int32)(unsafe.Add(base, off+8)))
}

// warmThreads makes the runtime start a few threads now and keep them idle. The runtime
// starts threads as it needs them and dies when it cannot; a command that fills the
// sandbox's pids limit must find the agent with the threads it needs already made.
func warmThreads() {
	// 4 were not enough: under a fork bomb the runtime asked for a ninth thread and died.
	const n = 8
	var p [2]int
	if unix.Pipe2(p[:], unix.O_CLOEXEC) != nil {
		return
	}
	done := make(chan struct{}, n)
	for range n {
		go func() {
			var b [1]byte
			_ = retry(func() error { _, err := unix.Read(p[0], b[:]); return err })
			done <- struct{}{}
		}()
	}
	// Blocked in read, each goroutine holds a thread; the runtime makes new ones for the rest.
	for range 200 {
		if threads() >= n+2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_, _ = unix.Write(p[1], make([]byte, n))
	for range n {
		<-done
	}
	unix.Close(p[0])
	unix.Close(p[1])
	runtime.Gosched()
}

// threads counts the agent's threads.
func threads() int {
	n := 0
	_ = readDir("/proc/self/task", func(string) { n++ })
	return n
}
