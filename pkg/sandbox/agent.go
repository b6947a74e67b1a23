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
// through a Unix socket in a host directory bind-mounted into the sandbox, and it starts
// commands without the engine's exec path. Sandboxes on other images, on remote engines, or
// made by an sbx whose agent differs use the engine's exec instead.

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
	// agentWait bounds how long starting a sandbox waits for its agent to listen.
	agentWait = 3 * time.Second
	// agentHello bounds the agent's greeting; a paused sandbox accepts but never greets.
	agentHello = 2 * time.Second
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

// agentRequest encodes the R frame: NUL-terminated fields tty, rows, cols, strict, cwd, argc,
// the arguments, then the variables. Arguments and variables cannot hold NUL (Exec refuses
// them), so any other bytes pass unchanged.
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
	fields := []string{copyFlag(opts.TTY), strconv.FormatUint(uint64(rows), 10), strconv.FormatUint(uint64(cols), 10),
		strict, opts.WorkDir, strconv.Itoa(len(cmd))}
	fields = append(append(fields, cmd...), opts.Env...)
	return []byte(strings.Join(fields, "\x00") + "\x00")
}

// agentStream is one command run by an agent.
type agentStream struct {
	conn net.Conn
	rd   *bufio.Reader
	mu   sync.Mutex // serialises frames written by the stdin and resize goroutines
	code int
	exit bool   // a Z frame arrived
	buf  []byte // the last frame's body
}

// startAgent starts cmd through sandbox sb's agent, or returns errNoAgent when it has none
// that answers.
func (m *Manager) startAgent(ctx context.Context, sb *Sandbox, opts ExecOptions, cmd []string, size *[2]uint) (*agentStream, error) {
	dir := m.agentDirOf(sb)
	if dir == "" || sb.Labels[LabelAgent] != AgentVersion || opts.User != "" {
		return nil, errNoAgent
	}
	conn, err := dialAgentSocket(ctx, dir)
	if err != nil {
		return nil, errNoAgent
	}
	s := &agentStream{conn: conn, rd: bufio.NewReaderSize(conn, 256<<10)}
	if err := s.hello(); err != nil {
		conn.Close()
		return nil, errNoAgent
	}
	if err := s.send('R', agentRequest(opts, cmd, size)); err != nil {
		conn.Close()
		return nil, errs.Failure(fmt.Errorf("sending a command to sandbox %q: %w", sb.Name, err), "")
	}
	return s, nil
}

// waitAgent waits until the agent of sandbox sb, which just started, takes connections; a
// socket left by its previous run refuses them. An agent that never comes leaves commands
// to the engine's exec.
func (m *Manager) waitAgent(ctx context.Context, sb *Sandbox) {
	dir := m.agentDirOf(sb)
	if dir == "" || sb.Labels[LabelAgent] != AgentVersion {
		return
	}
	const poll = 2 * time.Millisecond
	for range agentWait / poll {
		conn, err := dialAgentSocket(ctx, dir)
		if err == nil {
			conn.Close()
			sealAgentDir(dir)
			return
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if sleepCtx(ctx, poll) != nil {
			return
		}
	}
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

// maxFrame bounds a frame from the agent; the agent sends at most 256 KiB of output at once.
const maxFrame = 1 << 20

func (s *agentStream) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(s.rd, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("agent frame of %d bytes", n)
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
		case 'Z':
			s.code, err = strconv.Atoi(string(body))
			s.exit = err == nil
			return err
		case 'F':
			num, msg, _ := strings.Cut(string(body), "\x00")
			errno, _ := strconv.Atoi(num)
			return &spawnError{errno: syscall.Errno(errno), msg: msg}
		}
	}
}

func (s *agentStream) close() { s.conn.Close() }

// cancel ends the command's stdin, which the watchdog reads, and keeps the connection open
// for the exit code; a watchdog that cannot finish in time loses the connection.
func (s *agentStream) cancel() {
	_ = s.closeStdin()
	time.AfterFunc(KillGrace+5*time.Second, s.close)
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

// prepareAgentDir makes the host directory for the agent's socket before the sandbox starts:
// the engine refuses a bind mount whose source is missing. The sandbox user, whatever its
// uid, must be able to create the socket there; the directory sits in a private directory,
// so no other host user reaches it.
func prepareAgentDir(name, dir string) error {
	if dir == "" {
		return nil
	}
	// The directory above is what keeps other host users away from a socket anyone may
	// open, so it is made private even if something created it open.
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = os.Chmod(filepath.Dir(dir), 0o700)
	}
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: making its agent directory: %w", name, err), "")
	}
	return nil
}

// sealAgentDir takes write permission on the agent's directory away once its socket is
// bound, so that a sandbox user other than the directory's owner can no longer put files on
// the host's disk there. A sandbox user with the owner's uid (workspace rw, or a host user
// who is uid 1000 like the bundled images' user) could give it back; prepareAgentDir opens
// it again for the next start.
func sealAgentDir(dir string) { _ = os.Chmod(dir, 0o555) }
