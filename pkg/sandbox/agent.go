package sandbox

import (
	"bufio"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// The agent (agent.py) is the main process of sandboxes on bundled images: sbx reaches it
// through a Unix socket in a host directory bind-mounted read-only into the sandbox, and it
// starts commands without the engine's exec path. Sandboxes on other images, on remote
// engines, or made by an sbx whose agent differs use the engine's exec instead.
//
// Nothing in the sandbox can write to that directory, so sbx makes the socket: before it
// starts the sandbox it binds the listening socket agent.sock there, and a second one,
// handoff.sock, where the agent connects once it runs and receives agent.sock's listener
// (SCM_RIGHTS). Clients only ever dial agent.sock, so one that comes during the hand-off
// waits in its backlog and is never taken for the agent.

//go:embed agent.py
var agentSource string

// AgentVersion names the agent's source; a sandbox runs the agent its label names, and sbx
// talks only to the one it carries.
var AgentVersion = func() string {
	sum := sha256.Sum256([]byte(agentSource))
	return hex.EncodeToString(sum[:6])
}()

const (
	// LabelAgent is the version of the agent a sandbox runs; empty (or, from an older sbx,
	// absent) when it has none. Its socket's directory is not a label but always
	// StateStore.agentDir: older versions labelled it dev.sbx.agent-dir, which sbx no
	// longer reads, since an image can set it.
	LabelAgent = "dev.sbx.agent"
	// AgentMountPath is where that directory appears inside the sandbox.
	AgentMountPath = "/run/sbx-agent"
	agentSocket    = "agent.sock"
	handoffSocket  = "handoff.sock"
	// agentWait bounds how long starting a sandbox waits for its agent to take its socket;
	// an agent that comes later finds nobody and leaves commands to the engine's exec.
	agentWait = 10 * time.Second
	// agentHello bounds the agent's greeting; a paused sandbox accepts but never greets.
	agentHello = 2 * time.Second
	// maxAgentFrame bounds a frame from the agent, which sends at most 256 KiB of output at
	// once; maxAgentRequest bounds a frame to it (MAX_FRAME in agent.py), which a request,
	// with the command's arguments and variables, may fill: the kernel takes at most 6 MiB.
	maxAgentFrame   = 1 << 20
	maxAgentRequest = 8 << 20
)

// AgentsSupported reports whether sandboxes on the engine at host can run the agent: the
// engine must share this machine's filesystem, which a Unix socket here on Linux promises.
func AgentsSupported(host string) bool {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok || runtime.GOOS != "linux" {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() == os.ModeSocket
}

// agentEnv carries the agent's source to its process: on the command line, ps in the
// sandbox would show all of it. The agent removes it from the environment it passes on.
const agentEnv = "SBX_AGENT"

// agentCmd is the main process of a sandbox with an agent.
func agentCmd() []string {
	// -I ignores PYTHON* variables a config may set; -S skips site, which it does not need.
	return []string{"python3", "-I", "-S", "-c", "import os;exec(os.environ.pop('" + agentEnv + "'))", AgentVersion, AgentMountPath}
}

// agentDir is the host directory for the agent socket of a new sandbox name on image, or ""
// when the sandbox gets no agent.
func (m *Manager) agentDir(name, image string) string {
	if !m.Agents || m.State == nil {
		return ""
	}
	if _, bundled := images.ProfileFor(image); !bundled {
		return ""
	}
	return m.State.agentDir(name)
}

// agentDirOf is the host directory of existing sandbox sb's agent socket, or "" when it has
// no agent. sbx sets LabelAgent on every sandbox, so it says whether there is one; the path
// comes from the state directory and the sandbox's name.
func (m *Manager) agentDirOf(sb *Sandbox) string {
	if m.State == nil || sb.Labels[LabelAgent] == "" || config.ValidName(sb.Name) != nil {
		return ""
	}
	return m.State.agentDir(sb.Name)
}

// errNoAgent means the command must go through the engine's exec.
var errNoAgent = errors.New("no agent")

// noAgent is errNoAgent with the reason, for --debug.
type noAgent struct{ reason string }

func (e *noAgent) Error() string        { return e.reason }
func (e *noAgent) Is(target error) bool { return target == errNoAgent }

func noAgentf(format string, a ...any) error { return &noAgent{reason: fmt.Sprintf(format, a...)} }

// debugf writes one line for --debug.
func (m *Manager) debugf(format string, a ...any) {
	if m.Debug != nil {
		fmt.Fprintf(m.Debug, "sbx: "+format+"\n", a...)
	}
}

// agentRequest encodes the R frame: NUL-terminated fields tty, rows, cols, strict, timeout and
// grace in milliseconds, reap, cwd, argc, the arguments, then the variables. Arguments and
// variables cannot hold NUL (Exec refuses them), so any other bytes pass unchanged.
func agentRequest(opts ExecOptions, cmd []string, size *[2]uint) []byte {
	var rows, cols uint
	if size != nil {
		rows, cols = size[0], size[1]
	}
	// How a client that goes away is taken: 1 ends a stream early, 2 ends a command that
	// owns its stdin (-i), whose watchdog cannot see it.
	strict := "0"
	switch {
	case opts.strictStdin:
		strict = "1"
	case opts.Interactive && !opts.detach:
		strict = "2"
	}
	// A background process keeps its own timeout (procScript); what sbx starts to outlive the
	// exec is neither adopted by the command nor ended with it.
	timeout, reap := opts.Timeout, "1"
	if opts.detach || opts.outlive {
		reap = "0"
	}
	if opts.detach {
		timeout = 0
	}
	grace := KillGrace
	if opts.grace > 0 {
		grace = opts.grace
	}
	fields := []string{copyFlag(opts.TTY), strconv.FormatUint(uint64(rows), 10), strconv.FormatUint(uint64(cols), 10),
		strict, strconv.FormatInt(ceilMs(timeout), 10), strconv.FormatInt(ceilMs(grace), 10), reap,
		opts.WorkDir, strconv.Itoa(len(cmd))}
	fields = append(append(fields, cmd...), opts.Env...)
	return []byte(strings.Join(fields, "\x00") + "\x00")
}

// ceilMs is d in whole milliseconds, rounded up so that no timeout becomes none.
func ceilMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// agentStream is one command run by an agent.
type agentStream struct {
	m    *Manager
	sb   *Sandbox
	conn net.Conn
	rd   *bufio.Reader
	mu   sync.Mutex // serialises frames written by the stdin and resize goroutines
	code int
	exit bool   // a Z frame arrived
	late bool   // a T frame arrived: the agent ended the command at its timeout
	buf  []byte // the last frame's body

	pmu     sync.Mutex // the P frame's fields, read by backstop
	started [3]int     // the command's pid, its start time and the agent's pid (P)
}

// startAgent starts cmd through sandbox sb's agent, or returns an error that is errNoAgent,
// saying why, when it has none that answers.
func (m *Manager) startAgent(ctx context.Context, sb *Sandbox, opts ExecOptions, cmd []string, size *[2]uint) (*agentStream, error) {
	switch v := sb.Labels[LabelAgent]; {
	case v == "":
		return nil, noAgentf("sandbox %q has no agent (an image sbx does not bundle, an engine that cannot see sbx's state directory, or made without one)", sb.Name)
	case m.agentDirOf(sb) == "":
		return nil, noAgentf("sandbox %q: no state directory to find its agent's socket in", sb.Name)
	case v != AgentVersion:
		return nil, noAgentf("sandbox %q runs agent version %s, this sbx speaks %s (sbx create -n %s --replace gives it this one)", sb.Name, v, AgentVersion, sb.Name)
	case opts.User != "":
		return nil, noAgentf("-u %s: the agent runs commands only as the sandbox's user", opts.User)
	}
	req := agentRequest(opts, cmd, size)
	if len(req) > maxAgentRequest {
		return nil, errs.New(fmt.Errorf("the command's arguments and variables take %d bytes, more than a command line may hold", len(req)), errs.CodeCannotExec, "pass large data on stdin or in a file (sbx cp)")
	}
	conn, err := dialAgentSocket(ctx, m.agentDirOf(sb))
	if err != nil {
		return nil, noAgentf("sandbox %q: its agent did not answer: %v", sb.Name, err)
	}
	s := &agentStream{m: m, sb: sb, conn: conn, rd: bufio.NewReaderSize(conn, 256<<10)}
	if err := s.hello(); err != nil {
		conn.Close()
		return nil, noAgentf("sandbox %q: its agent did not greet: %v", sb.Name, err)
	}
	if err := s.send('R', req); err != nil {
		conn.Close()
		return nil, errs.Failure(fmt.Errorf("sending a command to sandbox %q: %w", sb.Name, err), "")
	}
	return s, nil
}

func (s *agentStream) hello() error {
	// A read deadline in the past ends a read that waits too long, without reading the clock.
	t := time.AfterFunc(agentHello, func() { _ = s.conn.SetReadDeadline(time.Unix(1, 0)) })
	typ, body, err := s.next()
	if !t.Stop() && err == nil {
		err = errors.New("greeting came too late")
	}
	if err != nil {
		return err
	}
	if typ != 'H' || string(body) != AgentVersion {
		return fmt.Errorf("unexpected greeting %q", body)
	}
	return nil
}

func (s *agentStream) send(typ byte, body []byte) error {
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(body)))
	s.mu.Lock()
	defer s.mu.Unlock()
	bufs := net.Buffers{hdr[:], body} // one writev
	_, err := bufs.WriteTo(s.conn)
	return err
}

// errAgentProtocol is a frame from the agent that sbx does not take: the connection is
// dropped.
var errAgentProtocol = errors.New("protocol error")

func (s *agentStream) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(s.rd, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxAgentFrame {
		return 0, nil, fmt.Errorf("%w: the agent sent a frame of %d bytes, more than %d", errAgentProtocol, n, maxAgentFrame)
	}
	// Output frames are written out before the next read, so their buffer is reused.
	if cap(s.buf) < int(n) {
		s.buf = make([]byte, n)
	}
	body := s.buf[:n]
	_, err := io.ReadFull(s.rd, body)
	return hdr[0], body, err
}

// Write sends stdin to the command.
func (s *agentStream) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += 256 << 10 {
		if err := s.send('I', p[off:min(len(p), off+256<<10)]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

func (s *agentStream) closeStdin() error { return s.send('E', nil) }
func (s *agentStream) abortStdin()       { _ = s.send('K', nil) }

func (s *agentStream) resize(h, w uint) {
	_ = s.send('W', []byte(fmt.Sprintf("%d %d", h, w)))
}

// copyOutput copies the command's output until it ends. It ends without an exit code when
// the agent went away (the sandbox stopped).
func (s *agentStream) copyOutput(stdout, stderr io.Writer) error {
	for {
		typ, body, err := s.next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
				return nil
			}
			return err
		}
		switch typ {
		case '1':
			if _, err := stdout.Write(body); err != nil {
				return err
			}
		case '2':
			if _, err := stderr.Write(body); err != nil {
				return err
			}
		case 'P':
			var p [3]int
			if n, _ := fmt.Sscanf(string(body), "%d %d %d", &p[0], &p[1], &p[2]); n != 3 || p[0] <= 0 {
				return fmt.Errorf("%w: the agent sent the process %q", errAgentProtocol, safeText(body))
			}
			s.pmu.Lock()
			s.started = p
			s.pmu.Unlock()
		case 'T':
			s.late = true
		case 'Z':
			s.code, err = strconv.Atoi(string(body))
			s.exit = err == nil
			if err != nil {
				return fmt.Errorf("%w: the agent sent exit status %q", errAgentProtocol, safeText(body))
			}
			return nil
		case 'F':
			num, msg, _ := strings.Cut(string(body), "\x00")
			errno, _ := strconv.Atoi(num)
			return &spawnError{errno: syscall.Errno(errno), msg: msg}
		case 'X':
			return fmt.Errorf("%w: the agent dropped the command: %s", errAgentProtocol, safeText(body))
		default:
			return fmt.Errorf("%w: the agent sent a frame of unknown type %q", errAgentProtocol, typ)
		}
	}
}

// safeText is text from the sandbox, cut short and with control characters escaped, for an
// error message.
func safeText(b []byte) string {
	q := strconv.QuoteToASCII(string(b[:min(len(b), 512)]))
	return q[1 : len(q)-1]
}

func (s *agentStream) close() { s.conn.Close() }

// cancel asks the agent to end the command (K) and keeps the connection open for the exit
// code; an agent that cannot finish in time loses the connection.
func (s *agentStream) cancel() {
	s.abortStdin()
	time.AfterFunc(KillGrace+5*time.Second, s.close)
}

func (s *agentStream) timedOut() bool       { return s.late }
func (s *agentStream) slack() time.Duration { return agentSlack }

// backstop ends the command from an exec of the engine when its agent has not reported it
// ended past its timeout, grace and slack: something in the sandbox stopped or traces the
// agent. The agent's pid gets CONT, so a stopped agent serves again.
func (s *agentStream) backstop(ctx context.Context) {
	defer s.close()
	s.pmu.Lock()
	p := s.started
	s.pmu.Unlock()
	if p[0] > 0 {
		s.m.debugf("sandbox %q: its agent did not report the command ended at its timeout; ending it through the engine's exec", s.sb.Name)
		s.m.killCommand(ctx, s.sb, "", p[0], strconv.Itoa(p[1]), p[2])
	}
}

// errAgentLost is an agent that went away before the command's exit code came: the sandbox
// stopped, or something in it killed the agent, which stops the sandbox.
var errAgentLost = errors.New("the sandbox's agent went away")

// wait returns the exit code the agent sent, or 137 and errAgentLost.
func (s *agentStream) wait(context.Context) (int, error) {
	if !s.exit {
		return 137, errAgentLost
	}
	return s.code, nil
}

// spawnErr turns an agent's failure to start a command into plain words.
func (m *Manager) spawnErr(sb *Sandbox, opts ExecOptions, e *spawnError) error {
	switch e.errno {
	case syscall.EAGAIN:
		return errs.Failure(fmt.Errorf("sandbox %q process limit reached: %s", sb.Name, e.msg),
			"wait for running commands to end, or raise pidsLimit (sbx explain shows where it is set)")
	case syscall.ENOENT, syscall.ENOTDIR, syscall.EACCES:
		if opts.WorkDir != "" {
			return errs.New(fmt.Errorf("cannot run in %s inside sandbox %q: %s", opts.WorkDir, sb.Name, e.msg), errs.CodeCannotExec,
				"pick an existing directory with -w")
		}
	}
	return errs.Failure(fmt.Errorf("starting a command in sandbox %q: %s", sb.Name, e.msg), "")
}

// spawnError is an agent that could not start a command.
type spawnError struct {
	errno syscall.Errno
	msg   string
}

func (e *spawnError) Error() string { return e.msg }

// prepareAgentDir makes the host directory for the agent's socket, which the engine must
// find to mount. The directory above is what keeps other host users away from a socket
// anyone may open, so it is made private even if something created it open. With legacy
// (a sandbox made by an sbx whose agent binds its own socket there, in a directory mounted
// read-write) the directory is opened to every user, as that sbx did, or its agent could
// not start; the sandbox then keeps that sbx's weakness, a directory it can write to, until
// it is recreated.
func prepareAgentDir(name, dir string, legacy bool) error {
	if dir == "" {
		return nil
	}
	mode := os.FileMode(0o755) // the sandbox user, whatever its uid, must reach handoff.sock
	if legacy {
		mode = 0o777
	}
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = os.Chmod(filepath.Dir(dir), 0o700)
	}
	if err == nil {
		err = os.Chmod(dir, mode)
	}
	if err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: making its agent directory: %w", name, err), "")
	}
	return nil
}

// agentStart is a sandbox being started with sbx's agent: its start lock, and the sockets
// sbx hands to the agent (nil when they could not be made).
type agentStart struct {
	sb   *Sandbox
	lock *os.File
	h    *agentHandoff
}

// startContainer starts sb. For a sandbox with this sbx's agent it first makes the agent's
// sockets, under a lock that keeps other sbx processes from starting it at the same time,
// and returns what finishAgent completes; it returns nil when another sbx started the
// sandbox meanwhile, or when there is no agent to hand anything to.
func (m *Manager) startContainer(ctx context.Context, sb *Sandbox) (*agentStart, error) {
	dir := m.agentDirOf(sb)
	if dir == "" || sb.Labels[LabelAgent] != AgentVersion {
		if err := prepareAgentDir(sb.Name, dir, true); err != nil {
			return nil, err
		}
		return nil, m.engineStart(ctx, sb)
	}
	if err := prepareAgentDir(sb.Name, dir, false); err != nil {
		return nil, err
	}
	lock, err := flockFile(ctx, m.State.agentLock(sb.Name), true, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errs.Failure(fmt.Errorf("sandbox %q: taking its start lock: %w", sb.Name, err), "")
	}
	// Another sbx may have started it since it was found stopped: handing out new sockets
	// now would take the running agent's away.
	if info, err := m.Engine.ContainerInspect(ctx, sb.ID); err == nil && info.State != nil && (info.State.Running || info.State.Paused) {
		lock.Close()
		return nil, nil
	}
	as := &agentStart{sb: sb, lock: lock}
	// What a previous run left: its sockets, and from an older sbx, whatever its sandbox
	// wrote there. What cannot go (another user's files) does no harm: nothing inside can
	// reach it but to read, and rm tries again.
	if err := m.State.empty(dir); err != nil {
		m.debugf("sandbox %q: clearing its agent directory: %v", sb.Name, err)
	}
	if as.h, err = listenHandoff(dir); err != nil {
		m.debugf("sandbox %q: cannot make its agent's socket (%v); commands will go through the engine's exec", sb.Name, err)
	}
	if err := m.engineStart(ctx, sb); err != nil {
		as.abandon()
		return nil, err
	}
	return as, nil
}

// finishAgent waits for the agent of the sandbox as started to connect, and hands it its
// socket. An agent that does not come in time leaves commands to the engine's exec.
func (m *Manager) finishAgent(ctx context.Context, as *agentStart) {
	if as == nil {
		return
	}
	defer as.abandon()
	if as.h == nil {
		return
	}
	if err := as.h.pass(ctx, agentWait); err != nil {
		m.debugf("sandbox %q: its agent did not take its socket: %v; commands will go through the engine's exec", as.sb.Name, err)
		return
	}
	as.h.close(true)
	as.h = nil
}

// abandon closes what is left of as: sockets the agent did not take are removed, so a
// client finds none rather than one nobody answers. It is safe on nil and when called twice.
func (as *agentStart) abandon() {
	if as == nil {
		return
	}
	if as.h != nil {
		as.h.close(false)
		as.h = nil
	}
	if as.lock != nil {
		as.lock.Close()
		as.lock = nil
	}
}
