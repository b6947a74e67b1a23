package sandbox

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// The engine cannot kill an exec, and once the pids limit is full no new exec can start, so
// every exec through the engine runs under execWrapper, which starts execWatchdog first; in
// detached mode the watchdog's place goes to the Launcher (pkg/proc's). The agent needs no
// wrapper: it ends a command itself, says when the OOM killer fired and what could not start.

// execWrapper wraps every command: see scripts/exec_wrapper.sh.
//
//go:embed scripts/exec_wrapper.sh
var execWrapper string

// execWatchdog ends a command at its timeout, or when it or sbx goes: see
// scripts/exec_watchdog.sh.
//
//go:embed scripts/exec_watchdog.sh
var execWatchdog string

// execOOMCheck reports whether the OOM killer fired during an exec: see
// scripts/exec_oom_check.sh.
//
//go:embed scripts/exec_oom_check.sh
var execOOMCheck string

// execCancel ends an interactive exec, whose watchdog does not read sbx's stdin: see
// scripts/exec_cancel.sh.
//
//go:embed scripts/exec_cancel.sh
var execCancel string

// execKill ends a command and all it started when its watchdog or agent did not: see
// scripts/exec_kill.sh.
//
//go:embed scripts/exec_kill.sh
var execKill string

const tick = 200 * time.Millisecond

// KillGrace is how long a terminated command gets between TERM and KILL.
const KillGrace = 5 * time.Second

// oomCheckWait bounds the OOM check after a command through the engine's exec was killed.
var oomCheckWait = 15 * time.Second

// agentSlack is how long after its timeout and grace sbx waits for an agent to report a
// command it ended before sbx ends it itself: the agent reports within a fraction of a
// second unless something in the sandbox stopped or traces it.
const agentSlack = 2 * time.Second

// ExecOptions describe one command run in a sandbox.
type ExecOptions struct {
	Cmd         []string
	Env         []string // per-exec variables; never stored on the container
	WorkDir     string
	User        string
	TTY         bool
	Interactive bool          // forward Stdin; its EOF closes the command's stdin
	Timeout     time.Duration // 0 means none
	Stdin       io.Reader
	Stdout      io.Writer
	Stderr      io.Writer
	// TTYSize returns the terminal size (height, width); Resize delivers changes. Both are
	// used only with TTY.
	TTYSize func() (uint, uint, bool)
	Resize  <-chan struct{}

	// Launcher, when set, starts Cmd as a background process that outlives the exec: the
	// script takes the watchdog's place in sbx's exec wrapper (its detached mode), reads its
	// parameters from Stdin and keeps the command's timeout itself. pkg/proc owns the one
	// such script.
	Launcher string
	// StrictStdin makes Stdin complete only when it ends without error: a read error, or
	// sbx going away, terminates the command's process group instead of ending its input. Only
	// the agent can tell these apart; without one, Exec fails with ErrNoAgent.
	StrictStdin bool
	// Outlive marks one of sbx's scripts that starts processes meant to outlive the exec (a
	// shell session's shell, pkg/proc): the agent neither adopts nor ends them with the
	// command.
	Outlive bool
	// grace replaces KillGrace in what the agent is told (tests).
	grace time.Duration
}

// ExecResult is how an exec ended.
type ExecResult struct {
	ExitCode  int
	TimedOut  bool
	OOMKilled bool
	// MemoryLimit is the sandbox's memory limit in bytes, set with OOMKilled: what the
	// sandbox was made with, which the command's own config may not say.
	MemoryLimit int64
	// SandboxKilled says the OOM kill took the whole sandbox, which then stopped: under
	// gVisor the memory limit holds the sandbox as one (its kernel and every process in it);
	// under runc the kernel at times kills the sandbox's agent after the command.
	SandboxKilled bool
	Canceled      bool
	// LeftRunning says sbx stopped waiting for a command past its timeout without being able
	// to end it (the engine's exec on an engine whose processes sbx cannot see).
	LeftRunning bool
	Duration    time.Duration
}

// Exec runs opts.Cmd in the running sandbox sb and returns its exit status. Cancelling ctx
// terminates the command's whole process group inside the sandbox before Exec returns.
func (m *Manager) Exec(ctx context.Context, sb *Sandbox, opts ExecOptions) (*ExecResult, error) {
	if len(opts.Cmd) == 0 {
		return nil, errs.Usagef("no command given")
	}
	for _, s := range slices.Concat(opts.Cmd, opts.Env, []string{opts.WorkDir}) {
		if strings.ContainsRune(s, 0) {
			return nil, errs.Usagef("%q contains a NUL byte, which no command line or variable can hold", s)
		}
	}
	ticks := 0
	if opts.Timeout > 0 {
		ticks = int((opts.Timeout + tick - 1) / tick)
	}
	ctl, watch := "stdin", execWatchdog
	switch {
	case opts.Launcher != "":
		ctl, watch = "detach", opts.Launcher
	case opts.Interactive:
		ctl = "tick"
	}
	// The wrapper, and the ID that names its files, serve the engine's exec and -d: a command
	// through the agent needs neither (crypto/rand's first read cost a warm exec 0.3 ms).
	id := ""
	wrapped := func() []string {
		if id == "" {
			id = RandomID()
		}
		return append(sb.Script(execWrapper, "sbx-exec", id, strconv.Itoa(ticks), strconv.Itoa(int(KillGrace/tick)), ctl, watch), opts.Cmd...)
	}
	bare := opts.Cmd
	if opts.Launcher != "" {
		bare = wrapped()
	}
	var size *[2]uint
	if opts.TTY && opts.TTYSize != nil {
		if h, w, ok := opts.TTYSize(); ok {
			size = &[2]uint{h, w}
		}
	}
	start := m.Now()
	st, err := m.startCommand(ctx, sb, opts, bare, wrapped, size)
	if err != nil {
		return nil, err
	}
	defer st.close()
	if es, ok := st.(*execStream); ok {
		es.wrapID, es.interactive = id, opts.Interactive
		if sb.underGVisor() {
			defer es.watchSandbox(ctx)()
		}
	}

	if (opts.Interactive || opts.Launcher != "") && opts.Stdin != nil {
		go func() {
			if _, err := io.Copy(st, opts.Stdin); err != nil && opts.StrictStdin {
				st.abortStdin()
				return
			}
			_ = st.closeStdin()
		}()
	}
	if opts.TTY && opts.Resize != nil && opts.TTYSize != nil {
		go func() {
			for range opts.Resize {
				if h, w, ok := opts.TTYSize(); ok {
					st.resize(h, w)
				}
			}
		}()
	}

	// The watchdog and the agent end a command at its timeout; this ends it should neither
	// have done so by the time they should have finished: the command killed its watchdog,
	// or stopped its agent.
	var dl *deadline
	if opts.Timeout > 0 && opts.Launcher == "" {
		bg := context.WithoutCancel(ctx)
		dl = afterDeadline(opts.Timeout+KillGrace+st.slack(), func() { st.backstop(bg) })
	}
	defer dl.stop()

	done := make(chan error, 1)
	go func() { done <- st.copyOutput(opts.Stdout, opts.Stderr) }()

	res := &ExecResult{}
	var streamErr error
	select {
	case streamErr = <-done:
	case <-ctx.Done():
		res.Canceled = true
		bg := context.WithoutCancel(ctx)
		st.cancel(bg)
		streamErr = <-done
		ctx = bg
	}
	// The backstop closes the stream it ended; waiting for it also keeps it from running
	// once the command has ended.
	fired := dl.stop()
	if es, ok := st.(*execStream); ok && es.sandboxStopped.Load() {
		return goneResult(sb, m.sandboxGone(ctx, sb), res, errors.New("the engine closed the command's stream"))
	}
	var spawnErr *agent.SpawnError
	if errors.As(streamErr, &spawnErr) {
		if spawnErr.Exec {
			return notRun(opts, spawnErr.Errno), nil
		}
		return nil, m.spawnErr(sb, opts, spawnErr)
	}
	// Returned as it is: it names what was too large, where the command line would be one
	// of sbx's scripts in full.
	var limitErr *OutputLimitError
	if errors.As(streamErr, &limitErr) {
		return nil, limitErr
	}
	if streamErr != nil && !errors.Is(streamErr, io.EOF) && !res.Canceled && !fired {
		return nil, errs.Failure(fmt.Errorf("reading output of %q: %w", strings.Join(opts.Cmd, " "), streamErr), "")
	}

	code, err := st.wait(ctx)
	switch {
	case errors.Is(err, errAgentLost) && !res.Canceled && !fired:
		if gone := m.sandboxGone(ctx, sb); gone != nil {
			return goneResult(sb, gone, res, nil)
		}
	case errors.Is(err, errAgentLost):
	case err == nil && code == 128 && sb.underGVisor():
		// runsc exec's own code when it lost the sandbox ("waiting on PID ...: EOF").
		if gone := m.sandboxGone(ctx, sb); gone != nil {
			return goneResult(sb, gone, res, nil)
		}
	case errors.Is(err, errStillRunning) && (fired || res.Canceled):
		code, res.LeftRunning = 137, true
	case err != nil:
		// An exec the engine forgot: the sandbox may have gone with it.
		return goneResult(sb, m.sandboxGone(ctx, sb), res, err)
	}
	res.ExitCode = code
	res.Duration = m.Now().Sub(start)
	// The agent says so; the watchdog's TERM or KILL past the timeout says so too.
	if !res.Canceled && (fired || st.timedOut() || opts.Timeout > 0 && res.Duration >= opts.Timeout && (code == 137 || code == 143)) {
		res.TimedOut = true
	}
	if (code == 137 || code == 143) && !res.TimedOut && !res.Canceled {
		// Killed from outside the command: by the OOM killer, by someone in the sandbox, or
		// because the sandbox itself went away (stopped, engine restarted), which a bare 137
		// would hide. A follow-up exec tells these apart; if it cannot run, the sandbox is gone.
		oom, err := st.oomKilled(ctx)
		if err != nil {
			if gone := m.sandboxGone(ctx, sb); gone != nil {
				return goneResult(sb, gone, res, nil)
			}
		}
		res.OOMKilled = code == 137 && oom
		if res.OOMKilled {
			res.MemoryLimit = sb.memoryLimit()
		}
	}
	return res, nil
}

// cmdStream is a command started in a sandbox, by its agent or by the engine's exec.
type cmdStream interface {
	io.Writer // the command's stdin
	closeStdin() error
	// abortStdin terminates the command because its stdin failed (StrictStdin).
	abortStdin()
	resize(h, w uint)
	// copyOutput copies the command's output until it ends.
	copyOutput(stdout, stderr io.Writer) error
	// cancel makes the watchdog or the agent end the command; copyOutput then returns.
	cancel(ctx context.Context)
	// oomKilled says whether the OOM killer fired while the command ran; an error means the
	// question could not be asked.
	oomKilled(ctx context.Context) (bool, error)
	// wait returns the exit code once the output has ended.
	wait(ctx context.Context) (int, error)
	// timedOut says the command's end was its timeout, as the agent reports it.
	timedOut() bool
	// slack is how long after timeout and grace backstop should run.
	slack() time.Duration
	// backstop ends the command by other means than those that failed to end it at its
	// timeout, then makes copyOutput return.
	backstop(ctx context.Context)
	close()
}

// deadline runs a function once its time has come, unless stopped before.
type deadline struct {
	t     *time.Timer
	done  chan struct{}
	once  sync.Once
	fired bool
}

func afterDeadline(d time.Duration, f func()) *deadline {
	dl := &deadline{done: make(chan struct{})}
	dl.t = time.AfterFunc(d, func() {
		defer close(dl.done)
		f()
	})
	return dl
}

// stop cancels the deadline, or waits for its function to return if it has begun, and
// reports whether it ran. It is safe on nil and when called again.
func (dl *deadline) stop() bool {
	if dl == nil {
		return false
	}
	dl.once.Do(func() {
		if !dl.t.Stop() {
			<-dl.done
			dl.fired = true
		}
	})
	return dl.fired
}

// startCommand starts forAgent through the sandbox's agent, else the command forEngine
// makes through the engine's exec.
func (m *Manager) startCommand(ctx context.Context, sb *Sandbox, opts ExecOptions, forAgent []string, forEngine func() []string, size *[2]uint) (cmdStream, error) {
	st, err := m.startAgent(ctx, sb, opts, forAgent, size)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, ErrNoAgent) || opts.StrictStdin {
		return nil, err
	}
	m.debugf("command through the engine's exec: %v", err)
	return m.startExec(ctx, sb, opts, forEngine(), size)
}

// notRun is the result of a command whose program the agent could not run, as a shell (and
// execWrapper) reports it: 127 for one not found, else 126.
func notRun(opts ExecOptions, errno syscall.Errno) *ExecResult {
	name, code, why := opts.Cmd[0], 126, errno.Error()
	if errno == syscall.ENOENT || errno == syscall.ENOTDIR {
		code = 127
		if !strings.Contains(name, "/") {
			why = "command not found"
		}
	}
	w := opts.Stderr
	if w == nil {
		w = opts.Stdout
	}
	if w != nil {
		fmt.Fprintf(w, "sbx: %s: %s\n", name, why)
	}
	return &ExecResult{ExitCode: code}
}

// execStream is a command started through the engine's exec API.
type execStream struct {
	m         *Manager
	sb        *Sandbox
	user      string
	id        string
	resp      types.HijackedResponse
	tty       bool
	closeOnce sync.Once
	ended     atomic.Bool // end ran
	late      atomic.Bool // backstop ran
	// sandboxStopped: watchSandbox saw the sandbox stop, and closed the stream.
	sandboxStopped atomic.Bool
	// wrapID names the command to execWrapper's helpers (Exec); interactive: its watchdog
	// does not read stdin.
	wrapID      string
	interactive bool
}

func (m *Manager) startExec(ctx context.Context, sb *Sandbox, opts ExecOptions, cmd []string, size *[2]uint) (*execStream, error) {
	created, err := m.Engine.ContainerExecCreate(ctx, sb.ID, container.ExecOptions{
		User: opts.User, Env: opts.Env, WorkingDir: opts.WorkDir, Cmd: cmd, Tty: opts.TTY,
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, m.execErr(ctx, sb, err)
	}
	resp, err := m.Engine.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: opts.TTY, ConsoleSize: size})
	if err != nil {
		return nil, m.execErr(ctx, sb, err)
	}
	s := &execStream{m: m, sb: sb, user: opts.User, id: created.ID, resp: resp, tty: opts.TTY}
	if size != nil {
		// Engines before API 1.42 ignore ConsoleSize on start; a resize always works.
		s.resize(size[0], size[1])
	}
	return s, nil
}

func (s *execStream) Write(p []byte) (int, error) { return s.resp.Conn.Write(p) }
func (s *execStream) closeStdin() error           { return s.resp.CloseWrite() }
func (s *execStream) abortStdin()                 { s.close() }
func (s *execStream) resize(h, w uint) {
	_ = s.m.Engine.ContainerExecResize(context.Background(), s.id, container.ResizeOptions{Height: h, Width: w})
}

func (s *execStream) copyOutput(stdout, stderr io.Writer) error {
	var err error
	if s.tty {
		_, err = io.Copy(stdout, s.resp.Reader)
	} else {
		_, err = stdcopy.StdCopy(stdout, stderr, s.resp.Reader)
	}
	return err
}

// cancel closes the connection: the engine closes the command's stdin, which the watchdog
// reads; with -i the watchdog reads no stdin, and is told by execCancel.
func (s *execStream) cancel(ctx context.Context) {
	if s.interactive {
		s.m.cancelExec(ctx, s.sb, s.wrapID)
	}
	s.close()
}

// oomKilled asks through a second exec, bounded: in a sandbox whose pids a fork bomb still
// holds, or that is going away, the engine may take as long as it likes to start it.
func (s *execStream) oomKilled(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, oomCheckWait)
	defer cancel()
	return s.m.oomKilled(ctx, s.sb, s.wrapID)
}
func (s *execStream) close() { s.closeOnce.Do(func() { s.resp.Close() }) }

func (s *execStream) wait(ctx context.Context) (int, error) {
	s.close()
	limit := KillGrace + 5*time.Second
	if s.late.Load() {
		// What end could kill dies at once; what it could not, sbx does not wait for.
		limit = 2 * time.Second
	}
	return s.m.waitExec(ctx, s.id, limit, func() { s.end(context.WithoutCancel(ctx)) })
}

func (s *execStream) timedOut() bool       { return false }
func (s *execStream) slack() time.Duration { return 0 }

// backstop ends the command, still running past its timeout and grace: its watchdog is gone.
func (s *execStream) backstop(ctx context.Context) {
	defer s.close()
	s.late.Store(true)
	s.end(ctx)
}

// end ends the exec's processes from a second exec, once: the engine names the exec's
// process by its pid on the engine's machine, which is this one when the engine is local,
// and /proc there gives its pid in the sandbox.
func (s *execStream) end(ctx context.Context) {
	if s.ended.Swap(true) {
		return
	}
	ins, err := s.m.Engine.ContainerExecInspect(ctx, s.id)
	if err != nil || !ins.Running || ins.Pid <= 0 {
		return
	}
	if !AgentsSupported(s.m.Engine.DaemonHost()) {
		s.m.debugf("the command runs on past its end, and the engine's processes are not this machine's: sbx cannot end it")
		return
	}
	pid, start, err := sandboxPid(ins.Pid)
	if err != nil {
		s.m.debugf("the command runs on past its end; finding it in the sandbox: %v", err)
		return
	}
	s.m.killCommand(ctx, s.sb, s.user, pid, start, 0)
}

// killCommand runs execKill through the engine's exec as user: the agent may be what failed.
func (m *Manager) killCommand(ctx context.Context, sb *Sandbox, user string, pid int, start string, agent int) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := sb.Script(execKill, "sbx-kill", strconv.Itoa(pid), start, strconv.Itoa(agent))
	for attempt := 0; ; attempt++ {
		st, err := m.startExec(ctx, sb, ExecOptions{User: user}, args, nil)
		if err == nil {
			st.ended.Store(true) // never itself the object of an end
			// The stream does not end with ctx: an exec into a gVisor sandbox under a fork
			// bomb went unanswered for minutes (measured).
			stop := context.AfterFunc(ctx, st.close)
			_ = st.copyOutput(io.Discard, io.Discard)
			stop()
			code, werr := st.wait(ctx)
			st.close()
			if werr == nil {
				m.debugf("ended the command's processes (pid %d in the sandbox): exit %d", pid, code)
				return
			}
			err = werr
		}
		// A fork bomb may hold every pid for a moment.
		if attempt == 4 || sleepCtx(ctx, 200*time.Millisecond) != nil {
			m.debugf("ending the command's processes (pid %d in the sandbox): %v", pid, err)
			return
		}
	}
}

// sandboxGone returns an error saying why when sandbox sb no longer runs. It waits a moment
// for a sandbox that is still stopping: the command dies before the engine records the stop.
func (m *Manager) sandboxGone(ctx context.Context, sb *Sandbox) error {
	for i := 0; ; i++ {
		info, err := m.Engine.ContainerInspect(ctx, sb.ID)
		switch {
		case err != nil:
			return errs.Failure(fmt.Errorf("sandbox %q: the command was killed and the engine no longer answers: %w", sb.Name, err),
				"the engine stopped or restarted while the command ran; check it with \"sbx doctor\" and run the command again")
		case info.State != nil && !info.State.Running && (sb.underGVisor() || info.State.ExitCode == 137) &&
			(info.State.OOMKilled || m.oomLogged(ctx, sb.ID, info.State.StartedAt)):
			// Under gVisor the OOM killer takes the whole sandbox, whose kernel holds the
			// memory. Under runc it can take the sandbox's main process (the agent) after the
			// command, which ends the sandbox with 137: the kernel kills again when a process
			// faults while the first victim's memory is still being freed, and then the agent
			// is all there is to choose (dmesg, 1 CI run: python3 killed at 64 MiB, then sbx at
			// 3 MiB used, 16 ms later). A container's flag also counts an earlier command's
			// kill in this run.
			return errSandboxOOM
		case info.State != nil && !info.State.Running:
			return errs.Failure(fmt.Errorf("sandbox %q stopped while the command ran (status %s); the command was killed with it", sb.Name, info.State.Status),
				"run the command again: sbx exec starts the sandbox (an engine restart stops every sandbox)")
		case i == 10:
			return nil
		}
		if sleepCtx(ctx, 100*time.Millisecond) != nil {
			return nil
		}
	}
}

// oomLogged reports whether the engine logged an OOM kill of container id since startedAt
// (its start, RFC 3339). Docker 20.10 stopped a gVisor sandbox killed for memory without
// its OOMKilled flag in 1 run of 10 here, when the task's exit outran its OOM event; the
// event is logged all the same, at times a moment after the exit, hence the seconds ahead.
func (m *Manager) oomLogged(ctx context.Context, id, startedAt string) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	msgs, errc := m.Engine.Events(ctx, events.ListOptions{
		Since:   startedAt,
		Until:   strconv.FormatInt(m.Now().Add(2*time.Second).Unix(), 10),
		Filters: filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)), filters.Arg("container", id), filters.Arg("event", string(events.ActionOOM))),
	})
	for {
		select {
		case msg := <-msgs:
			if msg.Action == events.ActionOOM && msg.Actor.ID == id {
				return true
			}
		case err := <-errc:
			// The stream's end (io.EOF at until) and a failure alike: no OOM seen.
			if err != nil && !errors.Is(err, io.EOF) {
				m.debugf("reading the engine's events for an OOM of %s: %v", id, err)
			}
			return false
		}
	}
}

// errSandboxOOM is a sandbox that the OOM killer stopped while a command ran in it.
var errSandboxOOM = errors.New("the sandbox was killed for memory")

// goneResult is Exec's answer when the sandbox may have gone under the command (gone, from
// sandboxGone): killed for memory, the command's result is an OOM kill (137), res with what
// Exec knew; stopped otherwise, gone itself; still running, other (nil: res stands).
func goneResult(sb *Sandbox, gone error, res *ExecResult, other error) (*ExecResult, error) {
	switch {
	case errors.Is(gone, errSandboxOOM):
		res.ExitCode, res.OOMKilled, res.SandboxKilled = 137, true, true
		res.MemoryLimit = sb.memoryLimit()
		return res, nil
	case gone != nil:
		return nil, gone
	case other != nil:
		return nil, other
	}
	return res, nil
}

// watchSandbox closes the stream when sandbox sb stops under it, and returns what stops the
// watch. Under gVisor the engine keeps the stream of an exec in a sandbox that stopped open
// for about ten minutes (measured: a memory bomb that killed the sandbox); under runc it
// closes at once, which is why only gVisor sandboxes pay for the watch.
func (s *execStream) watchSandbox(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	waitc, errc := s.m.Engine.ContainerWait(ctx, s.sb.ID, container.WaitConditionNotRunning)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-waitc:
			s.sandboxStopped.Store(true)
			s.close()
		case err := <-errc:
			if ctx.Err() == nil {
				s.m.debugf("sandbox %q: cannot watch for its stop during the command: %v", s.sb.Name, err)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// errStillRunning is an exec whose output ended but whose process runs on.
var errStillRunning = errors.New("the command was signalled but is still running")

// waitExec polls the exec until the engine reports its exit code. The output stream can end a
// moment before the engine records the exit, and after a cancel the watchdog needs up to the
// grace period; past it, end (when not nil) ends the command by other means. It gives up after
// limit.
func (m *Manager) waitExec(ctx context.Context, execID string, limit time.Duration, end func()) (int, error) {
	start := m.Now()
	for {
		ins, err := m.Engine.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, errs.Engine("reading the exit status", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		switch took := m.Now().Sub(start); {
		case took > limit:
			return 0, errs.Failure(fmt.Errorf("%w after %s", errStillRunning, limit), "")
		case took > KillGrace && end != nil:
			end()
			end = nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// oomKilled asks the sandbox whether the kernel's OOM killer fired during exec id. An error
// means the question could not be asked.
func (m *Manager) oomKilled(ctx context.Context, sb *Sandbox, id string) (bool, error) {
	out := &LimitedBuffer{What: fmt.Sprintf("the OOM check of sandbox %q", sb.Name), Limit: 64}
	code, err := m.script(ctx, sb, scriptRun{script: execOOMCheck, args: []string{id}, stdout: out})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	return strings.TrimSpace(out.String()) == "oom", err
}

func (m *Manager) cancelExec(ctx context.Context, sb *Sandbox, id string) {
	_, _ = m.script(ctx, sb, scriptRun{script: execCancel, args: []string{id, strconv.Itoa(int(KillGrace / tick))}})
}

// execErr turns an engine failure to start an exec into plain words.
func (m *Manager) execErr(ctx context.Context, sb *Sandbox, err error) error {
	switch {
	case cerrdefs.IsConflict(err): // the container is not running, or is paused
		return errs.Failure(fmt.Errorf("sandbox %q stopped before the command could start: %w", sb.Name, err),
			"run the command again: sbx exec starts a stopped sandbox")
	case engine.IsProcessLimit(err):
		return errs.Failure(fmt.Errorf("sandbox %q process limit reached: %w", sb.Name, err),
			"wait for running commands to end, or raise pidsLimit (sbx explain shows where it is set)")
	}
	return errs.Engine(fmt.Sprintf("running a command in sandbox %q", sb.Name), err)
}

// RandomID is 16 random hex digits, which a sandbox cannot guess: the names of execs, of
// copies' staging and of snippets' runs.
func RandomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
