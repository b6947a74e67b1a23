package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client is one connection to an agent, which runs one command.
type Client struct {
	conn net.Conn
	rd   *bufio.Reader
	mu   sync.Mutex // serialises frames written by the stdin and resize goroutines
	code int
	exit bool   // a Z frame arrived
	late bool   // a T frame arrived: the agent ended the command at its timeout
	oom  bool   // an M frame arrived: the OOM killer fired while the command ran
	buf  []byte // the last frame's body

	pmu     sync.Mutex // started, read while copyOutput runs
	started Process
}

// Process is the command as the agent's P frame names it.
type Process struct {
	Pid   int // in the sandbox
	Start int // its start time, field 22 of /proc/PID/stat
	Agent int // the agent's pid
}

func newClient(conn net.Conn) *Client {
	return &Client{conn: conn, rd: bufio.NewReaderSize(conn, 256<<10)}
}

// Hello waits for the agent's greeting and checks that it is this Version.
func (c *Client) Hello() error { return c.hello(helloWait) }

func (c *Client) hello(wait time.Duration) error {
	// A read deadline in the past ends a read that waits too long, without reading the clock.
	t := time.AfterFunc(wait, func() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) })
	typ, body, err := c.next()
	if !t.Stop() && err == nil {
		err = errors.New("greeting came too late")
	}
	if err != nil {
		return err
	}
	if typ != FrameHello || string(body) != Version() {
		return fmt.Errorf("unexpected greeting %q", body)
	}
	return nil
}

// Start sends the request, encoded by Request.Encode; with noInput, the end of the command's
// input goes with it, in the same write: sent later, it could meet a connection the agent
// closed already, the command done.
func (c *Client) Start(req []byte, noInput bool) error {
	if noInput {
		return c.send(FrameRequest, req, FrameStdinEOF)
	}
	return c.send(FrameRequest, req)
}

// send writes a frame of typ with body, then empty frames of the types in then, at once.
func (c *Client) send(typ FrameType, body []byte, then ...FrameType) error {
	hdr := make([]byte, 5)
	hdr[0] = byte(typ)
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(body)))
	bufs := net.Buffers{hdr, body} // one writev
	for _, t := range then {
		bufs = append(bufs, []byte{byte(t), 0, 0, 0, 0})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := bufs.WriteTo(c.conn)
	return err
}

// ErrProtocol is a frame from the agent that the client does not take: the caller drops the
// connection.
var ErrProtocol = errors.New("protocol error")

func (c *Client) next() (FrameType, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.rd, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("%w: the agent sent a frame of %d bytes, more than %d", ErrProtocol, n, maxFrame)
	}
	// Output frames are written out before the next read, so their buffer is reused.
	if cap(c.buf) < int(n) {
		c.buf = make([]byte, n)
	}
	body := c.buf[:n]
	_, err := io.ReadFull(c.rd, body)
	return FrameType(hdr[0]), body, err
}

// Write sends stdin to the command.
func (c *Client) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += Chunk {
		if err := c.send(FrameStdin, p[off:min(len(p), off+Chunk)]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// CloseStdin ends the command's input.
func (c *Client) CloseStdin() error { return c.send(FrameStdinEOF, nil) }

// Abort asks the agent to end the command and drop what input it did not write yet.
func (c *Client) Abort() { _ = c.send(FrameAbort, nil) }

// Resize sets the size of the command's terminal.
func (c *Client) Resize(h, w uint) { _ = c.send(FrameResize, []byte(fmt.Sprintf("%d %d", h, w))) }

// CopyOutput copies the command's output until it ends. It ends without an exit code when
// the agent went away (the sandbox stopped); a command that could not start is a
// *SpawnError.
func (c *Client) CopyOutput(stdout, stderr io.Writer) error {
	for {
		typ, body, err := c.next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
				return nil
			}
			return err
		}
		switch typ {
		case FrameStdout:
			if _, err := stdout.Write(body); err != nil {
				return err
			}
		case FrameStderr:
			if _, err := stderr.Write(body); err != nil {
				return err
			}
		case FrameProcess:
			var p Process
			if n, _ := fmt.Sscanf(string(body), "%d %d %d", &p.Pid, &p.Start, &p.Agent); n != 3 || p.Pid <= 0 {
				return fmt.Errorf("%w: the agent sent the process %q", ErrProtocol, safeText(body))
			}
			c.pmu.Lock()
			c.started = p
			c.pmu.Unlock()
		case FrameTimeout:
			c.late = true
		case FrameExit:
			c.code, err = strconv.Atoi(string(body))
			c.exit = err == nil
			if err != nil {
				return fmt.Errorf("%w: the agent sent exit status %q", ErrProtocol, safeText(body))
			}
			return nil
		case FrameSpawnFailed:
			num, rest, _ := strings.Cut(string(body), "\x00")
			msg, stage, _ := strings.Cut(rest, "\x00")
			errno, _ := strconv.Atoi(num)
			return &SpawnError{Errno: syscall.Errno(errno), Msg: msg, Exec: stage == "exec"}
		case FrameOOM:
			c.oom = true
		case FrameRefused:
			return fmt.Errorf("%w: the agent dropped the command: %s", ErrProtocol, safeText(body))
		default:
			return fmt.Errorf("%w: the agent sent a frame of unknown type %q", ErrProtocol, typ)
		}
	}
}

// safeText is text from the sandbox, cut short and with control characters escaped, for an
// error message.
func safeText(b []byte) string {
	q := strconv.QuoteToASCII(string(b[:min(len(b), 512)]))
	return q[1 : len(q)-1]
}

// Exit is the command's exit code, once CopyOutput has returned; ok is false when none came
// (the agent went away).
func (c *Client) Exit() (code int, ok bool) { return c.code, c.exit }

// TimedOut says the agent ended the command at its timeout.
func (c *Client) TimedOut() bool { return c.late }

// OOMKilled says the kernel's OOM killer fired in the sandbox while the command ran.
func (c *Client) OOMKilled() bool { return c.oom }

// Started is the command's process as the agent named it; its Pid is 0 until then.
func (c *Client) Started() Process {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.started
}

// Close drops the connection.
func (c *Client) Close() { c.conn.Close() }

// SpawnError is an agent that could not start a command.
type SpawnError struct {
	Errno syscall.Errno
	Msg   string
	// Exec says the command's own exec failed (a program missing or that cannot run), not
	// the agent's steps before it (a fork, the working directory).
	Exec bool
}

func (e *SpawnError) Error() string { return e.Msg }

// maxStatus bounds the answer to a status query: "off", "busy" or a number of milliseconds.
const maxStatus = 20

// Status asks the agent whose directory is dir about its idle stop (PROTOCOL.md, "Idle
// stop"): "off", "busy", or the milliseconds left until it stops the sandbox. Asking is no
// use of the sandbox: it does not put the stop off.
func Status(ctx context.Context, dir string) (string, error) {
	c, err := Dial(ctx, dir)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.Hello(); err != nil {
		return "", err
	}
	if err := c.send(FrameStatus, nil); err != nil {
		return "", err
	}
	t := time.AfterFunc(helloWait, func() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer t.Stop()
	typ, body, err := c.next()
	switch {
	case err != nil:
		return "", err
	case typ != FrameStatus || len(body) > maxStatus:
		return "", fmt.Errorf("%w: frame %q (%s) to a status query", ErrProtocol, byte(typ), safeText(body))
	}
	return string(body), nil
}

// maxLimits bounds the answer to a limits query: three lines of a name and two numbers.
const maxLimits = 256

// CgroupLimits are the limits of a sandbox's cgroup as its agent read them (PROTOCOL.md,
// "Limits"). A limit the agent could not read is unknown (Known false); -1 is none.
type CgroupLimits struct {
	Memory, Pids        int64 // bytes, processes
	CPUQuota, CPUPeriod int64 // microseconds of CPU time per period
	Known               map[string]bool
}

// Limits asks the agent whose directory is dir for its sandbox's cgroup limits. Asking is
// no use of the sandbox.
func Limits(ctx context.Context, dir string) (CgroupLimits, error) {
	c, err := Dial(ctx, dir)
	if err != nil {
		return CgroupLimits{}, err
	}
	defer c.Close()
	if err := c.Hello(); err != nil {
		return CgroupLimits{}, err
	}
	if err := c.send(FrameLimits, nil); err != nil {
		return CgroupLimits{}, err
	}
	t := time.AfterFunc(helloWait, func() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer t.Stop()
	typ, body, err := c.next()
	switch {
	case err != nil:
		return CgroupLimits{}, err
	case typ != FrameLimits || len(body) > maxLimits:
		return CgroupLimits{}, fmt.Errorf("%w: frame %q (%s) to a limits query", ErrProtocol, byte(typ), safeText(body))
	}
	l, err := ParseLimits(string(body))
	if err != nil {
		return CgroupLimits{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return l, nil
}

// ParseLimits reads the agent's answer to a limits query.
func ParseLimits(s string) (CgroupLimits, error) {
	l := CgroupLimits{Memory: -1, Pids: -1, CPUQuota: -1, Known: map[string]bool{}}
	num := func(v string) (int64, error) {
		if v == "max" {
			return -1, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("limit %s", safeText([]byte(v)))
		}
		return n, nil
	}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if line == "" {
			continue
		}
		key, v, _ := strings.Cut(line, "=")
		if l.Known[key] {
			return l, fmt.Errorf("limit %s twice", safeText([]byte(key)))
		}
		var err error
		switch key {
		case "memory":
			l.Memory, err = num(v)
		case "pids":
			l.Pids, err = num(v)
		case "cpu":
			quota, period, _ := strings.Cut(v, "/")
			if l.CPUQuota, err = num(quota); err == nil {
				l.CPUPeriod, err = num(period)
			}
			if err == nil && l.CPUPeriod <= 0 {
				err = fmt.Errorf("cpu period %s", safeText([]byte(period)))
			}
		default:
			err = fmt.Errorf("unknown limit %s", safeText([]byte(key)))
		}
		if err != nil {
			return l, err
		}
		l.Known[key] = true
	}
	return l, nil
}

// Await waits up to wait for the agent whose socket is in dir to answer, for an agent that
// binds its socket itself (OwnSocket): until it has, there is no socket, or one that
// refuses. It asks with S, which is no use of the sandbox.
func Await(ctx context.Context, dir string, wait time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		_, err := Status(wctx, dir)
		if err == nil {
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-wctx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("no answer within %s (%w)", wait, err)
		case <-t.C:
		}
	}
}
