package agentd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/agent"

	"golang.org/x/sys/unix"
)

const (
	in  = unix.EPOLLIN
	out = unix.EPOLLOUT
)

// output is one of a command's outputs while it is open, and the frame type its data goes in.
type output struct {
	fd  int
	typ agent.FrameType
}

// conn is one client connection: one command, one relay or one status query.
type conn struct {
	s         *server
	fd        int
	events    uint32
	inbuf     []byte
	out       []byte
	gone      bool
	requested bool // an R or C came (whether or not it started anything)
	pid       int
	job       *job
	status    int
	hasStatus bool
	reported  bool     // Z was sent (or would have been, to a client gone)
	outputs   []output // in the order they are reported
	paused    bool
	master    int // the terminal's master side in TTY mode, or -1
	stdin     int // or -1
	stdinBuf  []byte
	stdinEOF  bool
	strict    string // as it came: any value but the three known ends nothing
	reap      bool
	oom0      int  // oomKills when the command started
	relay     bool // a C request: stdin and the output are one socket to a port
	peer      int  // that socket while it connects, or -1
}

func newConn(s *server, fd int) *conn {
	c := &conn{s: s, fd: fd, master: -1, stdin: -1, peer: -1, strict: strictString(agent.StrictNone)}
	s.used(c)
	c.send(frame(agent.FrameHello, []byte(agent.Version())))
	return c
}

func strictString(m agent.Strict) string { return strconv.Itoa(int(m)) }

func frame(t agent.FrameType, data []byte) []byte {
	f := make([]byte, 5, 5+len(data))
	f[0] = byte(t)
	binary.BigEndian.PutUint32(f[1:], uint32(len(data)))
	return append(f, data...)
}

// sendSock writes to a client's socket; a client gone is an error, never a SIGPIPE.
func sendSock(fd int, b []byte) (int, error) {
	return unix.SendmsgN(fd, b, nil, nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
}

func (c *conn) send(data []byte) {
	if !c.gone {
		c.out = append(c.out, data...)
		c.update()
	}
}

func (c *conn) update() {
	if c.gone {
		return
	}
	var ev uint32
	if len(c.stdinBuf) < agent.High {
		ev = in
	}
	if len(c.out) > 0 {
		ev |= out
	}
	if ev != c.events {
		if ev != 0 {
			c.s.watch(c.fd, ev, handler{fn: c.onSock, conn: c})
		} else {
			c.s.unwatch(c.fd)
		}
		c.events = ev
	}
	// A relay's port keeps what the client has not taken in its own socket buffer: read only
	// when nothing is queued.
	limit := agent.High
	if c.relay {
		limit = 0
	}
	c.pause(len(c.out) > limit)
}

// pause stops reading the command's output while the client is behind.
func (c *conn) pause(on bool) {
	if on == c.paused {
		return
	}
	c.paused = on
	for _, o := range c.outputs {
		if on {
			c.s.unwatch(o.fd)
		} else {
			c.watchOutput(o.fd)
		}
	}
}

func (c *conn) watchOutput(fd int) {
	c.s.watch(fd, in, handler{fn: func(uint32) error { c.onOutput(fd); return nil }, conn: c})
}

func (c *conn) onSock(ev uint32) error {
	if ev&out != 0 {
		n, err := sendSock(c.fd, c.out)
		switch err {
		case nil:
			c.out = shift(c.out, n)
		case unix.EAGAIN:
		default:
			c.drop()
			return nil
		}
		if len(c.out) == 0 && c.done() {
			c.close()
			return nil
		}
	}
	if ev&(in|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.inbuf = grow(c.inbuf, agent.Chunk)
		n, err := unix.Read(c.fd, c.inbuf[len(c.inbuf):len(c.inbuf)+agent.Chunk])
		switch {
		case err == unix.EAGAIN:
		case err != nil || n == 0:
			c.drop()
			return nil
		default:
			c.inbuf = c.inbuf[:len(c.inbuf)+n]
			if err := c.frames(); err != nil {
				return err
			}
		}
	}
	c.update()
	return nil
}

// shift drops b's first n bytes, and its array once nothing is left.
func shift(b []byte, n int) []byte {
	if n >= len(b) {
		return nil
	}
	return b[n:]
}

// grow makes room for n more bytes after b's end.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), max(2*cap(b), len(b)+n))
	copy(nb, b)
	return nb
}

// pyBytes spells a frame type as the protocol's error texts do (b'Q').
func pyBytes(t byte) string {
	switch {
	case t == '\\':
		return `b'\\'`
	case t == '\'':
		return `b"'"`
	case t == '\t':
		return `b'\t'`
	case t == '\n':
		return `b'\n'`
	case t == '\r':
		return `b'\r'`
	case t >= 0x20 && t < 0x7f:
		return "b'" + string(rune(t)) + "'"
	}
	return fmt.Sprintf(`b'\x%02x'`, t)
}

// clientFrames are the frame types a client may send.
var clientFrames = string([]byte{byte(agent.FrameRequest), byte(agent.FrameConnect), byte(agent.FrameStdin),
	byte(agent.FrameStdinEOF), byte(agent.FrameResize), byte(agent.FrameAbort), byte(agent.FrameStatus), byte(agent.FrameLimits)})

func (c *conn) frames() error {
	for len(c.inbuf) >= 5 && !c.gone {
		t, n := agent.FrameType(c.inbuf[0]), binary.BigEndian.Uint32(c.inbuf[1:5])
		if !strings.ContainsRune(clientFrames, rune(t)) {
			return protocolError("unknown frame type " + pyBytes(byte(t)))
		}
		if n > agent.MaxRequest {
			return protocolError(fmt.Sprintf("frame %s of %d bytes, more than %d", pyBytes(byte(t)), n, agent.MaxRequest))
		}
		end := 5 + int(n)
		if len(c.inbuf) < end {
			return nil
		}
		body := c.inbuf[5:end]
		if t == agent.FrameStdin { // the bulk of a copy: straight to the pipe when nothing waits
			if !c.stdinEOF {
				done := 0
				if len(c.stdinBuf) == 0 && c.stdin >= 0 {
					w, err := unix.Write(c.stdin, body)
					switch err {
					case nil:
						done = w
					case unix.EAGAIN:
					default: // the command closed its stdin
						if c.relay { // the port reset: so does the relay
							c.drop()
							return nil
						}
						done = len(body)
					}
				}
				c.stdinBuf = append(c.stdinBuf, body[done:]...)
			}
			c.inbuf = shift(c.inbuf, end)
			c.feed()
			continue
		}
		data := string(body)
		c.inbuf = shift(c.inbuf, end)
		switch t {
		case agent.FrameStatus:
			if c.requested {
				return protocolError("a status query on a command's connection")
			}
			delete(c.s.clients, c) // asking is no use of the sandbox
			c.status, c.hasStatus, c.reported = 0, true, true
			c.send(frame(agent.FrameStatus, []byte(c.s.idleStatus())))
		case agent.FrameLimits:
			if c.requested || c.reported {
				return protocolError("a limits query on a command's connection")
			}
			delete(c.s.clients, c)
			c.status, c.hasStatus, c.reported = 0, true, true
			c.send(frame(agent.FrameLimits, []byte(cgroupLimits())))
		case agent.FrameRequest:
			if c.requested || c.reported {
				return protocolError("a second request on one connection")
			}
			if err := c.spawn(strings.Split(data, "\x00")); err != nil {
				return err
			}
		case agent.FrameConnect:
			if c.requested || c.reported {
				return protocolError("a second request on one connection")
			}
			if err := c.connect(data); err != nil {
				return err
			}
		case agent.FrameStdinEOF:
			c.stdinEOF = true
			c.feed()
		case agent.FrameAbort:
			c.abort()
		case agent.FrameResize:
			rows, cols, err := parseSize(data)
			if err != nil {
				return err
			}
			if c.master >= 0 {
				if err := winsize(c.master, rows, cols); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// parseSize reads a W frame's "rows cols".
func parseSize(data string) (rows, cols uint16, err error) {
	f := strings.Fields(data)
	if len(f) != 2 {
		return 0, 0, errors.New("a resize must be rows and cols in decimal")
	}
	r, err1 := strconv.ParseUint(f[0], 10, 16)
	cl, err2 := strconv.ParseUint(f[1], 10, 16)
	if err1 != nil || err2 != nil {
		return 0, 0, errors.New("a resize must be rows and cols below 65536")
	}
	return uint16(r), uint16(cl), nil
}

func winsize(fd int, rows, cols uint16) error {
	return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}

func (c *conn) abort() {
	// Before the input ends: the command dies, or cleans up and exits, without ever reading
	// an end of input.
	if c.job != nil && !c.hasStatus {
		if c.reap {
			c.job.end()
		} else {
			_ = unix.Kill(-c.pid, unix.SIGTERM)
		}
	}
	c.endInput()
}

// endInput closes the command's stdin now, dropping what was not written yet.
func (c *conn) endInput() {
	c.stdinBuf = nil
	c.stdinEOF = true
	if c.stdin >= 0 {
		c.s.unwatch(c.stdin)
		if c.relay { // the port reads its end of input; the socket stays open for reading
			_ = unix.Shutdown(c.stdin, unix.SHUT_WR)
		}
		c.s.closeFD(c.stdin) // a terminal's copy only: it has no EOF to pass on
		c.stdin = -1
		if c.relay {
			c.finish()
		}
	}
	c.update()
}

// drop takes the client as gone: the command's input ends, its output is still drained.
func (c *conn) drop() {
	strictExit, strictStdin := c.strict == strictString(agent.StrictExit), c.strict == strictString(agent.StrictStdin)
	strictNone := c.strict == strictString(agent.StrictNone)
	if (strictExit || strictNone && c.reap) && !c.hasStatus || strictStdin && !c.stdinEOF {
		c.abort()
	}
	c.close()
	c.out = nil
	c.endInput()
	c.pause(false)
	if c.peer >= 0 { // still connecting
		c.s.unwatch(c.peer)
		c.s.closeFD(c.peer)
		c.peer = -1
	}
	if c.relay { // nobody reads the port's data any more
		for len(c.outputs) > 0 {
			c.endOutput(c.outputs[0].fd)
		}
	}
	if c.master >= 0 { // hang up the terminal
		c.endOutput(c.master)
	}
}

// fail gives up on the connection (a frame refused, or a bug in a handler of fd): it tells
// the client why if its socket takes it at once, then drops it as a client that went away.
func (c *conn) fail(why string, fd int) {
	if !c.gone {
		c.out = append(c.out, frame(agent.FrameRefused, []byte(why[:min(len(why), 4096)]))...)
		_, _ = sendSock(c.fd, c.out)
	}
	if fd >= 0 && c.outputIndex(fd) >= 0 { // its handler failed: never read it again
		c.endOutput(fd)
	}
	c.drop()
}

func (c *conn) outputIndex(fd int) int {
	for i, o := range c.outputs {
		if o.fd == fd {
			return i
		}
	}
	return -1
}

func (c *conn) close() {
	if c.s.clients[c] {
		c.s.used(nil)
		delete(c.s.clients, c)
	}
	if !c.gone {
		c.s.unwatch(c.fd)
		c.events = 0
		c.gone = true
		c.s.closeFD(c.fd)
	}
}

// spawn starts the command an R frame's fields ask for (PROTOCOL.md, "Request").
func (c *conn) spawn(f []string) error {
	malformed := protocolError("malformed request")
	if len(f) < 10 {
		return malformed
	}
	nums := make([]int, 0, 6)
	for _, i := range []int{1, 2, 4, 5, 8} {
		v, err := strconv.Atoi(f[i])
		if err != nil {
			return malformed
		}
		nums = append(nums, v)
	}
	rows, cols, timeout, grace, argc := nums[0], nums[1], nums[2], nums[3], nums[4]
	tty := f[0] == "1"
	c.strict, c.reap = f[3], f[6] == "1"
	cwd := f[7]
	if argc < 1 || 9+argc > len(f)-1 || f[len(f)-1] != "" || rows < 0 || rows >= 1<<16 || cols < 0 || cols >= 1<<16 {
		return malformed
	}
	argv, envs := f[9:9+argc], f[9+argc:len(f)-1]
	env := c.s.env(tty, envs)
	c.requested = true
	var mine, theirs []int // our ends of the command's stdio, and the command's
	defer func() {
		for _, fd := range theirs {
			unix.Close(fd)
		}
	}()
	c.oom0 = oomKills()
	var err error
	if tty {
		err = c.startTTY(&mine, &theirs, uint16(rows), uint16(cols), argv, env, cwd)
	} else {
		err = c.startPipes(&mine, &theirs, argv, env, cwd)
	}
	if err != nil {
		for _, fd := range mine { // whatever failed, the agent keeps no descriptor of this command
			c.s.closeFD(fd)
		}
		c.master, c.stdin, c.outputs = -1, -1, nil
		c.send(frame(agent.FrameSpawnFailed, spawnFailure(err)))
		return nil
	}
	c.job = newJob(c, c.pid, ms(timeout), ms(grace))
	for _, fd := range mine {
		_ = unix.SetNonblock(fd, true)
	}
	for _, o := range c.outputs {
		c.watchOutput(o.fd)
	}
	c.feed()
	return nil
}

// announce sends the P frame for the command's process pid, which has not run yet, and
// writes it out at once rather than from the loop: the command may stop the agent as its
// first act.
func (c *conn) announce(pid int) {
	c.send(frame(agent.FrameProcess, fmt.Appendf(nil, "%d %d %d", pid, stat(pid).start, c.s.mypid)))
	if n, err := sendSock(c.fd, c.out); err == nil {
		c.out = shift(c.out, n)
	}
}

func (c *conn) startTTY(mine, theirs *[]int, rows, cols uint16, argv, env []string, cwd string) error {
	master, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	*mine = append(*mine, master)
	slave, err := openSlave(master)
	if err != nil {
		return err
	}
	*theirs = append(*theirs, slave)
	if rows > 0 && cols > 0 {
		if err := winsize(slave, rows, cols); err != nil {
			return err
		}
	}
	dup, err := unix.FcntlInt(uintptr(master), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	*mine = append(*mine, dup)
	if c.pid, err = c.s.start(argv, env, cwd, [3]int{slave, slave, slave}, true, c.reap, c.announce); err != nil {
		return err
	}
	c.master, c.stdin = master, dup
	c.outputs = []output{{master, agent.FrameStdout}}
	return nil
}

// openSlave opens the terminal whose master side is master.
func openSlave(master int) (int, error) {
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		return -1, err
	}
	n, err := unix.IoctlGetUint32(master, unix.TIOCGPTN)
	if err != nil {
		return -1, err
	}
	return unix.Open("/dev/pts/"+strconv.FormatUint(uint64(n), 10), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
}

func (c *conn) startPipes(mine, theirs *[]int, argv, env []string, cwd string) error {
	for i := range 3 { // the command reads the first and writes the others
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return err
		}
		if i == 0 {
			*mine, *theirs = append(*mine, p[1]), append(*theirs, p[0])
		} else {
			*mine, *theirs = append(*mine, p[0]), append(*theirs, p[1])
		}
	}
	for _, fd := range *mine { // fewer wakeups on large streams; the default is 64 KiB
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, 1<<20)
	}
	var err error
	if c.pid, err = c.s.start(argv, env, cwd, [3]int{(*theirs)[0], (*theirs)[1], (*theirs)[2]}, false, c.reap, c.announce); err != nil {
		return err
	}
	c.stdin = (*mine)[0]
	c.outputs = []output{{(*mine)[1], agent.FrameStdout}, {(*mine)[2], agent.FrameStderr}}
	return nil
}

// connect starts a relay to the port data names on the sandbox's loopback (PROTOCOL.md).
func (c *conn) connect(data string) error {
	port, err := strconv.Atoi(data)
	if err != nil || port <= 0 || port >= 1<<16 || data != strconv.Itoa(port) {
		return protocolError("malformed request")
	}
	c.requested = true
	c.relay = true
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil { // out of descriptors
		return c.connected(errnoOf(err, unix.EMFILE))
	}
	c.peer = s
	err = unix.Connect(s, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	switch {
	case err == unix.EINPROGRESS && !writable(s):
		c.s.watch(s, out, handler{fn: c.onConnect, conn: c})
		return nil
	case err == unix.EINPROGRESS: // loopback usually answers within the call
		return c.connected(soError(s))
	case err != nil:
		return c.connected(errnoOf(err, unix.EIO))
	}
	return c.connected(0)
}

// writable says whether fd takes a write now: a connection to loopback is usually made by then.
func writable(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, _ := unix.Poll(p, 0)
	return n > 0
}

func soError(fd int) unix.Errno {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return errnoOf(err, unix.EIO)
	}
	return unix.Errno(v)
}

func (c *conn) onConnect(uint32) error {
	c.s.unwatch(c.peer)
	return c.connected(soError(c.peer))
}

func (c *conn) connected(errno unix.Errno) error {
	s := c.peer
	c.peer = -1
	if errno != 0 {
		if s >= 0 {
			c.s.closeFD(s)
		}
		c.send(frame(agent.FrameSpawnFailed, fmt.Appendf(nil, "%d\x00%s", int(errno), errno.Error())))
		c.finish()
		return nil
	}
	dup, err := unix.FcntlInt(uintptr(s), unix.F_DUPFD_CLOEXEC, 0) // the writing side, shut down at the client's E
	if err != nil {
		c.s.closeFD(s)
		return fmt.Errorf("a relay's socket: %w", err)
	}
	c.stdin = dup
	c.outputs = []output{{s, agent.FrameStdout}}
	c.send(frame(agent.FrameConnected, nil))
	if !c.paused {
		c.watchOutput(s)
	}
	c.feed()
	return nil
}

func (c *conn) feed() {
	if c.stdin < 0 {
		return
	}
	for len(c.stdinBuf) > 0 {
		n, err := unix.Write(c.stdin, c.stdinBuf[:min(len(c.stdinBuf), agent.Chunk)])
		if err == unix.EAGAIN {
			break
		}
		if err != nil { // the command closed its stdin
			if c.relay { // the port reset: so does the relay
				c.drop()
				return
			}
			c.stdinBuf = nil
			break
		}
		c.stdinBuf = shift(c.stdinBuf, n)
	}
	switch {
	case len(c.stdinBuf) > 0:
		c.s.watch(c.stdin, out, handler{fn: func(uint32) error { c.feed(); return nil }, conn: c})
		c.update()
	case c.stdinEOF:
		c.endInput()
	default:
		c.s.unwatch(c.stdin)
		c.update()
	}
}

func (c *conn) onOutput(fd int) {
	i := c.outputIndex(fd)
	if i < 0 {
		return
	}
	typ := c.outputs[i].typ
	buf := c.s.scratch
	n, err := unix.Read(fd, buf[5:])
	switch {
	case err == unix.EAGAIN:
		return
	case err != nil: // EIO: nothing holds the terminal's other side any more
		if c.relay { // the port reset: so does the relay
			c.drop()
			return
		}
		n = 0
	}
	if n == 0 {
		if c.relay {
			c.send(frame(agent.FrameStdinEOF, nil))
		}
		c.endOutput(fd)
		return
	}
	buf[0] = byte(typ)
	binary.BigEndian.PutUint32(buf[1:5], uint32(n))
	msg := buf[:5+n]
	if len(c.out) > 0 || c.gone {
		c.send(msg)
		return
	}
	// Nothing queued: straight to the kernel.
	sent, err := sendSock(c.fd, msg)
	switch err {
	case nil:
	case unix.EAGAIN:
		sent = 0
	default:
		c.drop()
		return
	}
	if sent < len(msg) {
		c.send(msg[sent:])
	}
}

func (c *conn) endOutput(fd int) {
	c.s.unwatch(fd)
	if i := c.outputIndex(fd); i >= 0 {
		c.outputs = append(c.outputs[:i], c.outputs[i+1:]...)
	}
	c.s.closeFD(fd)
	if fd == c.master {
		c.master = -1
	}
	c.finish()
}

func (c *conn) done() bool {
	if c.relay { // both ways ended, or the connection never came about
		return c.peer < 0 && c.stdin < 0 && len(c.outputs) == 0
	}
	return c.hasStatus && len(c.outputs) == 0
}

func (c *conn) finish() {
	if !c.done() || c.reported {
		return
	}
	c.reported = true
	if c.relay { // nothing more to say: close once what is queued is sent
		if len(c.out) == 0 {
			c.close()
		}
		return
	}
	if c.oom0 >= 0 && oomKills() > c.oom0 {
		c.send(frame(agent.FrameOOM, nil))
	}
	c.send(frame(agent.FrameExit, []byte(strconv.Itoa(c.status))))
	c.endInput() // without E (sbx sends none without -i) it would stay open
}

// force reports the end now with what the outputs hold at this moment: processes the agent
// could not attribute to the command hold them open, or the command is not reaped yet after
// its KILL.
func (c *conn) force() {
	if c.reported {
		return
	}
	if !c.hasStatus {
		c.status, c.hasStatus = 128+int(unix.SIGKILL), true
	}
	for len(c.outputs) > 0 {
		o := c.outputs[0]
		buf := c.s.scratch
		for range 16 { // what is there, up to 4 MiB, never a stream without end
			n, err := unix.Read(o.fd, buf[5:])
			if err != nil || n <= 0 {
				break
			}
			buf[0] = byte(o.typ)
			binary.BigEndian.PutUint32(buf[1:5], uint32(n))
			c.send(buf[:5+n])
		}
		c.endOutput(o.fd)
	}
	c.finish()
}

// errnoOf is err's errno, or def when it carries none.
func errnoOf(err error, def unix.Errno) unix.Errno {
	if e, ok := err.(unix.Errno); ok {
		return e
	}
	return def
}
