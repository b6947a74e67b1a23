package sandbox

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// The agent (pkg/agent) is this sbx's own binary, mounted read-only into the sandbox and run
// as its main process: sbx reaches it through a Unix socket in a host directory bind-mounted
// read-only into the sandbox, and it starts commands without the engine's exec path. A
// static sbx (CGO_ENABLED=0, as make build makes it) runs in any Linux image; one linked
// dynamically needs a libc, which only the bundled images are sure to have. Sandboxes on
// remote engines, or made by an sbx whose agent differs, use the engine's exec instead. Under
// gVisor the agent binds its socket itself (gvisoragent.go). This file is the lifecycle
// around it: where its directory is, handing it its socket when a sandbox starts, and
// whether a command goes to it.

const (
	// LabelAgent is the version of the agent a sandbox runs (agent.Version()); empty (or, from
	// an older sbx, absent) when it has none. Its socket's directory is not a label but
	// always StateStore.agentDir: older versions labelled it dev.sbx.agent-dir, which sbx no
	// longer reads, since an image can set it.
	LabelAgent = "dev.sbx.agent"
	// AgentMountPath is where that directory appears inside the sandbox.
	AgentMountPath = "/run/sbx-agent"
	// AgentBinaryPath is where the sandbox sees sbx's binary, read-only: apart from the
	// socket's directory, which sbx empties on every start.
	AgentBinaryPath = "/run/sbx-agent-bin/sbx"
)

// agentWait bounds how long starting a sandbox waits for its agent to take its socket (or,
// under gVisor, to answer on the one it binds); an agent that comes later finds nobody and
// leaves commands to the engine's exec. A variable for tests.
var agentWait = 10 * time.Second

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

// agentDir is the host directory for the agent socket of a new sandbox name with cfg, or ""
// when the sandbox gets no agent (noAgentReason).
func (m *Manager) agentDir(name string, cfg config.Config) string {
	if why := m.noAgentReason(cfg); why != "" {
		m.debugf("sandbox %q gets no agent: %s", name, why)
		return ""
	}
	return m.State.DirIn(AreaAgent, name)
}

// noAgentReason is why a new sandbox with cfg gets no agent, or "" when it gets one: the one
// rule agentDir, and CommandPath for explain, follow.
func (m *Manager) noAgentReason(cfg config.Config) string {
	switch {
	case !m.Agents:
		return "the engine cannot see this machine's files (a remote engine, or not Linux), so sbx cannot reach an agent's socket"
	case m.State == nil:
		return "sbx has no state directory for the agent's socket"
	}
	return m.agentBinaryProblem(cfg.Image)
}

// Command paths (CommandPath).
const (
	PathAgent  = "agent"
	PathEngine = "engine exec"
)

// CommandPath says how sandbox sb (nil: one not made yet, with cfg) runs commands: PathAgent
// (sbx's agent, in any image, when sbx can bring it) or PathEngine (the engine's exec), with
// why for the engine.
func (m *Manager) CommandPath(sb *Sandbox, cfg config.Config) (path, why string) {
	if sb == nil {
		if why := m.noAgentReason(cfg); why != "" {
			return PathEngine, why
		}
		return PathAgent, ""
	}
	if err := m.agentReady(sb); err != nil {
		return PathEngine, err.Error()
	}
	return PathAgent, ""
}

// agentBinary is what sbx learnt of its binary, once: whether a sandbox can run it.
type agentBinary struct {
	once    sync.Once
	problem string // why no sandbox can run it; "" when any can
	dynamic bool   // it needs a libc (a cgo build): only bundled images have one
}

// agentBinaryProblem says why a sandbox on image cannot run m.AgentBinary as its agent, or "".
func (m *Manager) agentBinaryProblem(image string) string {
	b := &m.agentBin
	b.once.Do(func() { b.problem, b.dynamic = inspectAgentBinary(m.AgentBinary) })
	switch {
	case b.problem != "":
		return b.problem
	case b.dynamic:
		if _, bundled := images.ProfileFor(image); !bundled {
			return fmt.Sprintf("this sbx (%s) is linked dynamically (a cgo build), and image %s is not one sbx bundles, which have its libc; a static sbx (CGO_ENABLED=0, as make build makes) runs in any image", m.AgentBinary, image)
		}
	}
	return ""
}

// inspectAgentBinary reads sbx's binary at path: why no sandbox can run it ("" when one can),
// and whether it is linked dynamically.
func inspectAgentBinary(path string) (problem string, dynamic bool) {
	if path == "" {
		return "sbx does not know where its binary is", false
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf("its binary: %v", err), false
	}
	// The sandbox user, whatever its uid, must read and run it.
	if fi.Mode().Perm()&0o005 != 0o005 {
		return fmt.Sprintf("%s is not readable and executable by every user (mode %s)", path, fi.Mode().Perm()), false
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Sprintf("%s is no ELF binary: %v", path, err), false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", true
		}
	}
	return "", false
}

// agentDirOf is the host directory of existing sandbox sb's agent socket, or "" when it has
// no agent. sbx sets LabelAgent on every sandbox, so it says whether there is one; the path
// comes from the state directory and the sandbox's name.
func (m *Manager) agentDirOf(sb *Sandbox) string {
	if m.State == nil || sb.Labels[LabelAgent] == "" || config.ValidName(sb.key()) != nil {
		return ""
	}
	return m.State.DirIn(AreaAgent, sb.key())
}

// ErrNoAgent means the command must go through the engine's exec: an Exec with StrictStdin
// fails with it, before anything was sent, when the sandbox's agent does not answer.
var ErrNoAgent = errors.New("no agent")

// noAgent is ErrNoAgent with the reason, for --debug.
type noAgent struct{ reason string }

func (e *noAgent) Error() string        { return e.reason }
func (e *noAgent) Is(target error) bool { return target == ErrNoAgent }

func noAgentf(format string, a ...any) error { return &noAgent{reason: fmt.Sprintf(format, a...)} }

// debugf writes one line for --debug.
func (m *Manager) debugf(format string, a ...any) {
	if m.Debug != nil {
		fmt.Fprintf(m.Debug, "sbx: "+format+"\n", a...)
	}
}

// agentRequest is the request for cmd, started for opts: how a client that goes away is
// taken, and whether what the command starts is its own to end.
func agentRequest(opts ExecOptions, cmd []string, size *[2]uint) agent.Request {
	req := agent.Request{TTY: opts.TTY, Timeout: opts.Timeout, Grace: KillGrace, Reap: true, Dir: opts.WorkDir, Argv: cmd, Env: opts.Env}
	if size != nil {
		req.Rows, req.Cols = size[0], size[1]
	}
	// A stream that ends early must not look complete; a command that owns its stdin (-i)
	// has no watchdog to see the client go.
	switch {
	case opts.StrictStdin:
		req.Strict = agent.StrictStdin
	case opts.Interactive && opts.Launcher == "":
		req.Strict = agent.StrictExit
	}
	// A background process keeps its own timeout (its Launcher); what sbx starts to outlive the
	// exec is neither adopted by the command nor ended with it.
	if opts.Launcher != "" || opts.Outlive {
		req.Reap = false
	}
	if opts.Launcher != "" {
		req.Timeout = 0
	}
	if opts.grace > 0 {
		req.Grace = opts.grace
	}
	return req
}

// agentReady returns nil when sandbox sb runs this sbx's agent, else an error that is
// ErrNoAgent, saying why.
func (m *Manager) agentReady(sb *Sandbox) error {
	switch v := sb.Labels[LabelAgent]; {
	case v == "":
		why := "made under gVisor by an older sbx, on an engine that cannot see sbx's state directory, or without one"
		if p := m.agentBinaryProblem(sb.Image); p != "" {
			why = p
		}
		return noAgentf("sandbox %q has no agent (%s)", sb.Name, why)
	case m.agentDirOf(sb) == "":
		return noAgentf("sandbox %q: no state directory to find its agent's socket in", sb.Name)
	case v != agent.Version():
		return noAgentf("sandbox %q runs agent version %s, this sbx speaks %s (sbx create -n %s --replace gives it this one)", sb.Name, v, agent.Version(), sb.Name)
	}
	return nil
}

// agentStream is one command run by an agent.
type agentStream struct {
	*agent.Client
	m  *Manager
	sb *Sandbox
}

// startAgent starts cmd through sandbox sb's agent, or returns an error that is ErrNoAgent,
// saying why, when it has none that answers.
func (m *Manager) startAgent(ctx context.Context, sb *Sandbox, opts ExecOptions, cmd []string, size *[2]uint) (*agentStream, error) {
	if err := m.agentReady(sb); err != nil {
		return nil, err
	}
	if opts.User != "" {
		return nil, noAgentf("-u %s: the agent runs commands only as the sandbox's user", opts.User)
	}
	req := agentRequest(opts, cmd, size).Encode()
	if len(req) > agent.MaxRequest {
		return nil, errs.New(fmt.Errorf("the command's arguments and variables take %d bytes, more than a command line may hold", len(req)), errs.CodeCannotExec, "pass large data on stdin or in a file (sbx cp)")
	}
	c := sb.takeAgent() // greeted already by Warm
	if c == nil {
		var err error
		if c, err = agent.Dial(ctx, m.agentDirOf(sb)); err != nil {
			return nil, noAgentf("sandbox %q: its agent did not answer: %v", sb.Name, err)
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, noAgentf("sandbox %q: its agent did not greet: %v", sb.Name, err)
		}
	}
	// Without -i the command reads an empty stdin, as from docker exec.
	if err := c.Start(req, !opts.Interactive && opts.Launcher == ""); err != nil {
		c.Close()
		return nil, errs.Failure(fmt.Errorf("sending a command to sandbox %q: %w", sb.Name, err), "")
	}
	return &agentStream{Client: c, m: m, sb: sb}, nil
}

func (s *agentStream) closeStdin() error                         { return s.CloseStdin() }
func (s *agentStream) abortStdin()                               { s.Abort() }
func (s *agentStream) resize(h, w uint)                          { s.Resize(h, w) }
func (s *agentStream) copyOutput(stdout, stderr io.Writer) error { return s.CopyOutput(stdout, stderr) }
func (s *agentStream) close()                                    { s.Close() }
func (s *agentStream) timedOut() bool                            { return s.TimedOut() }
func (s *agentStream) slack() time.Duration                      { return agentSlack }

func (s *agentStream) oomKilled(context.Context) (bool, error) { return s.OOMKilled(), nil }

// cancel asks the agent to end the command (K) and keeps the connection open for the exit
// code; an agent that cannot finish in time loses the connection.
func (s *agentStream) cancel(context.Context) {
	s.Abort()
	time.AfterFunc(KillGrace+5*time.Second, s.Close)
}

// backstop ends the command from an exec of the engine when its agent has not reported it
// ended past its timeout, grace and slack: something in the sandbox stopped or traces the
// agent. The agent's pid gets CONT, so a stopped agent serves again.
func (s *agentStream) backstop(ctx context.Context) {
	defer s.Close()
	if p := s.Started(); p.Pid > 0 {
		s.m.debugf("sandbox %q: its agent did not report the command ended at its timeout; ending it through the engine's exec", s.sb.Name)
		s.m.killCommand(ctx, s.sb, "", p.Pid, strconv.Itoa(p.Start), p.Agent)
	}
}

// errAgentLost is an agent that went away before the command's exit code came: the sandbox
// stopped, or something in it killed the agent, which stops the sandbox.
var errAgentLost = errors.New("the sandbox's agent went away")

// wait returns the exit code the agent sent, or 137 and errAgentLost.
func (s *agentStream) wait(context.Context) (int, error) {
	code, ok := s.Exit()
	if !ok {
		return 137, errAgentLost
	}
	return code, nil
}

// spawnErr turns an agent's failure to start a command into plain words.
func (m *Manager) spawnErr(sb *Sandbox, opts ExecOptions, e *agent.SpawnError) error {
	switch e.Errno {
	case syscall.EAGAIN:
		return errs.Failure(fmt.Errorf("sandbox %q process limit reached: %s", sb.Name, e.Msg),
			"wait for running commands to end, or raise pidsLimit (sbx explain shows where it is set)")
	case syscall.ENOENT, syscall.ENOTDIR, syscall.EACCES:
		if opts.WorkDir != "" {
			return errs.New(fmt.Errorf("cannot run in %s inside sandbox %q: %s", opts.WorkDir, sb.Name, e.Msg), errs.CodeCannotExec,
				"pick an existing directory with -w")
		}
	}
	return errs.Failure(fmt.Errorf("starting a command in sandbox %q: %s", sb.Name, e.Msg), "")
}

// prepareAgentDir makes the host directory for the agent's socket, which the engine must
// find to mount. The directory above is what keeps other host users away from a socket
// anyone may open, so it is made private even if something created it open. With writable
// (a sandbox whose agent binds its own socket there, in a directory mounted read-write:
// gVisor's, see gvisoragent.go, or one made by an older sbx) the directory is opened to
// every user, or its agent, whatever its uid, could not make the socket; an older sbx's
// sandbox keeps that weakness, a directory it can write to, until it is recreated.
func prepareAgentDir(name, dir string, writable bool) error {
	if dir == "" {
		return nil
	}
	mode := os.FileMode(0o755) // the sandbox user, whatever its uid, must reach handoff.sock
	if writable {
		mode = 0o777
	}
	if err := mountDir(dir, mode); err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: making its agent directory: %w", name, err), "")
	}
	return nil
}

// mountDir makes dir, a host directory a sandbox mounts, with mode, and the directory above it
// private to the host user even if something created it open: that is what keeps other host
// users away from what the sandbox may read.
func mountDir(dir string, mode os.FileMode) error {
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = os.Chmod(filepath.Dir(dir), 0o700)
	}
	if err == nil {
		err = os.Chmod(dir, mode)
	}
	return err
}

// agentStart is a sandbox being started with sbx's agent: its start lock, and the sockets
// sbx hands to the agent (nil when they could not be made).
type agentStart struct {
	sb   *Sandbox
	lock *os.File
	h    *agent.Handoff
	// await: the agent binds its socket itself (gvisoragent.go), and finishAgent waits
	// for it to answer there.
	await bool
	// host is the container's host configuration as the engine reported it before the
	// start, which checkCgroupLimits holds the agent's answer to.
	host *container.HostConfig
}

// startContainer starts sb. For a sandbox with this sbx's agent it first makes the agent's
// sockets, under a lock that keeps other sbx processes from starting it at the same time,
// and returns what finishAgent completes; it returns nil when another sbx started the
// sandbox meanwhile, or when there is no agent to hand anything to.
func (m *Manager) startContainer(ctx context.Context, sb *Sandbox) (*agentStart, error) {
	if err := m.checkCABundle(ctx, sb); err != nil {
		return nil, err
	}
	dir := m.agentDirOf(sb)
	if dir == "" || sb.Labels[LabelAgent] != agent.Version() {
		if err := prepareAgentDir(sb.Name, dir, true); err != nil {
			return nil, err
		}
		return nil, m.engineStart(ctx, sb)
	}
	ownSocket := agentOwnsSocket(sb.isolation())
	if err := prepareAgentDir(sb.Name, dir, ownSocket); err != nil {
		return nil, err
	}
	lock, err := flock.Open(ctx, m.State.LockIn(AreaAgent, sb.key()), true, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errs.Failure(fmt.Errorf("sandbox %q: taking its start lock: %w", sb.Name, err), "")
	}
	// Another sbx may have started it since it was found stopped: handing out new sockets
	// now would take the running agent's away.
	info, err := m.Engine.ContainerInspect(ctx, sb.ID)
	if err == nil && info.State != nil && (info.State.Running || info.State.Paused) {
		lock.Close()
		return nil, nil
	}
	as := &agentStart{sb: sb, lock: lock}
	if err == nil && info.ContainerJSONBase != nil {
		as.host = info.HostConfig
	}
	// What a previous run left: its sockets, and from an older sbx, whatever its sandbox
	// wrote there. What cannot go (another user's files) does no harm: nothing inside can
	// reach it but to read, and rm tries again.
	if err := m.State.empty(dir); err != nil {
		m.debugf("sandbox %q: clearing its agent directory: %v", sb.Name, err)
	}
	if ownSocket {
		return m.startOwnSocket(ctx, as)
	}
	if err := m.linkIdleLock(sb.Name, dir); err != nil {
		m.debugf("sandbox %q: no idle lock for its agent (%v); it will not stop for idleness", sb.Name, err)
	}
	if as.h, err = agent.ListenHandoff(dir); err != nil {
		m.debugf("sandbox %q: cannot make its agent's socket (%v); commands will go through the engine's exec", sb.Name, err)
	}
	if err := m.engineStart(ctx, sb); err != nil {
		as.abandon()
		return nil, err
	}
	return as, nil
}

// finishAgent waits for the agent of the sandbox as started to connect, and hands it its
// socket. An agent that does not come in time leaves commands to the engine's exec. It
// reports whether the agent answers.
func (m *Manager) finishAgent(ctx context.Context, as *agentStart) bool {
	if as == nil {
		return false
	}
	defer as.abandon()
	if as.await {
		// The socket the agent made: a warm exec checks it is still that one (warm.go).
		if !m.awaitAgent(ctx, as.sb) {
			return false
		}
		m.recordStart(as.sb)
		return true
	}
	if as.h == nil {
		return false
	}
	if err := as.h.Pass(ctx, agentWait); err != nil {
		m.debugf("sandbox %q: its agent did not take its socket: %v; commands will go through the engine's exec", as.sb.Name, err)
		return false
	}
	as.h.Close(true)
	as.h = nil
	m.recordStart(as.sb)
	return true
}

// abandon closes what is left of as: sockets the agent did not take are removed, so a
// client finds none rather than one nobody answers. It is safe on nil and when called twice.
func (as *agentStart) abandon() {
	if as == nil {
		return
	}
	if as.h != nil {
		as.h.Close(false)
		as.h = nil
	}
	if as.lock != nil {
		as.lock.Close()
		as.lock = nil
	}
}
