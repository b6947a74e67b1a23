package proc

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/internal/lazyre"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// A shell session is a long-lived interactive bash inside the sandbox, so the working
// directory, variables, functions and aliases one call sets are there in the next. It lives
// under ShellDir/SESSION on the sandbox's /tmp tmpfs (so it ends when the sandbox stops):
//
//	fifo        the shell's stdin: it reads one command line per call from it
//	pid         "PID STARTTIME EPOCH": the shell, its start in clock ticks (to tell a reused
//	            PID), and when it started
//	exited      the shell's exit status, written by its supervisor when it ends
//	lock        flock'ed for the whole of a call, so calls on one session never interleave
//	last        touched at the end of every call
//	ID.sh       the call's script; ID.out and ID.err its stdout and stderr; ID.st its status
//
// The shell is started by a supervisor in a session of its own (like a background process,
// it outlives the exec that started it) and is itself the leader of a new session, so its
// process group holds it and what it runs. It is interactive (bash -i, without job control
// since it has no terminal) for one reason: on SIGINT an interactive shell abandons the
// command line it runs and goes back to reading the next one, alive and with its state, as
// a terminal's Ctrl-C does. Each call writes its script to ID.sh and sends one line:
//
//	PROMPT_COMMAND='STATUS'; \builtin \. ID.sh </dev/null >ID.out 2>ID.err; STATUS
//
// where STATUS appends "$? MARKER" to ID.st. The script runs in the shell itself (so cd and
// export last), with its output in files (so it is exact: no prompt, no sentinel in the
// stream, any bytes). When the script ends the line's own STATUS records its exit status;
// when SIGINT abandons the line, the prompt command records 130; the first line of ID.st is
// the one that counts. MARKER is random for each call, so nothing the script prints or
// writes by accident passes for a status.
//
// The exec that sends the call (shellCall, under the usual watchdog) streams ID.out and
// ID.err back as they grow, and ends its stdout with a trailer "MARKER key=value...", which
// Shell strips. On timeout, or when sbx goes away (its end of stdin closes, or it is
// cancelled), it interrupts the call: SIGINT to the shell's process group, which abandons
// the line; after a moment KILL to what the call started and left running (members of the
// group that started after it, its background jobs included, never the shell nor earlier
// background jobs); then, should the line not have been abandoned (the script ignores
// SIGINT), a line that records the status; and only when the shell still does not answer,
// KILL to the shell, which the next call replaces.
const ShellDir = "/tmp/.sbx-sh"

// DefaultSession is the session "sbx sh" uses without -s.
const DefaultSession = "default"

// ShellLockWait is how long a call waits, by default, for another call on the same session
// to end.
const ShellLockWait = time.Minute

// shellCommon holds the helpers of shellCall and shellList: see scripts/shell_common.sh.
//
//go:embed scripts/shell_common.sh
var shellCommon string

// shellSupervisor starts a session's shell and records its exit status: see
// scripts/shell_supervisor.sh.
//
//go:embed scripts/shell_supervisor.sh
var shellSupervisor string

//go:embed scripts/shell_call.sh
var shellCallBody string

// shellCall runs one call in a session: see scripts/shell_call.sh.
var shellCall = shellCommon + shellCallBody

//go:embed scripts/shell_list.sh
var shellListBody string

// shellList lists the shell sessions: see scripts/shell_list.sh.
var shellList = shellCommon + shellListBody

var sessionPattern = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// ValidSession checks a session name before it becomes part of a path.
func ValidSession(name string) error {
	if !sessionPattern().MatchString(name) {
		return errs.Usagef("bad session name %q: use letters, digits, - and _ (at most 64)", name)
	}
	return nil
}

// ShellOptions describe one call to a shell session.
type ShellOptions struct {
	Session string // DefaultSession when ""
	Script  []byte
	// NoScript only makes sure the session has a shell (with Reset, a new one).
	NoScript bool
	// Reset replaces the session's shell with a new one before the script runs.
	Reset bool
	// Timeout interrupts the script when it runs longer; 0 means never.
	Timeout time.Duration
	// LockWait bounds the wait for another call on the session; 0 means ShellLockWait.
	LockWait time.Duration
	// Env and WorkDir are a new shell's environment and directory; an existing shell keeps
	// its own.
	Env     []string
	WorkDir string
	Stdout  io.Writer
	Stderr  io.Writer
}

// ShellResult is how a call ended.
type ShellResult struct {
	ExitCode int
	TimedOut bool
	Canceled bool
	// Started says why the call started a new shell: "" (it used the running one), "new"
	// (the session had none), "reset", or "replaced" (the previous one had ended; PrevExit
	// is its exit status as recorded, "?" when unknown).
	Started  string
	PrevExit string
	// ShellExited says the shell itself ended during the call (exit, set -e, out of
	// memory); ExitCode is then its exit status. ShellKilled says sbx killed it because it
	// did not give up the timed-out command.
	ShellExited bool
	ShellKilled bool
	Duration    time.Duration
}

// Notice describes what happened to the session's shell during the call, "" when nothing
// did (a first shell is not worth a word).
func (r *ShellResult) Notice(session string) string {
	switch {
	case r.Started == "replaced":
		return fmt.Sprintf("the shell of session %q had ended (exit status %s); this call ran in a new one, so its directory, variables and functions started afresh", session, r.PrevExit)
	case r.Started == "reset":
		return fmt.Sprintf("started a new shell for session %q", session)
	case r.ShellExited:
		return fmt.Sprintf("the shell of session %q exited (status %d); the next call starts a new one", session, r.ExitCode)
	case r.ShellKilled:
		return fmt.Sprintf("the shell of session %q did not give up the timed-out command and was killed; the next call starts a new one", session)
	}
	return ""
}

// ShellBusyError is a call that found its session busy with another call for the whole wait.
type ShellBusyError struct {
	Sandbox, Session string
	Waited           time.Duration
}

func (e *ShellBusyError) Error() string {
	return fmt.Sprintf("shell session %q of sandbox %q is busy: another call has held it for more than %s", e.Session, e.Sandbox, e.Waited)
}

// ExitCode is 125: the script did not run.
func (e *ShellBusyError) ExitCode() int { return errs.CodeFailure }

// Hint says what to do.
func (e *ShellBusyError) Hint() string {
	return "try again when the other call ends, wait longer with --wait, or use another session with -s NAME"
}

// Shell runs opts.Script in a shell session of sandbox sb and returns how it ended; its
// output goes to opts.Stdout and opts.Stderr byte for byte as it comes.
func Shell(ctx context.Context, x Execer, sb *sandbox.Sandbox, opts ShellOptions) (*ShellResult, error) {
	session := opts.Session
	if session == "" {
		session = DefaultSession
	}
	if err := ValidSession(session); err != nil {
		return nil, err
	}
	if len(opts.Script) > sandbox.MaxCodeSize {
		return nil, errs.Usagef("the script is %d bytes, more than the %d a shell call accepts", len(opts.Script), sandbox.MaxCodeSize)
	}
	wait := opts.LockWait
	if wait <= 0 {
		wait = ShellLockWait
	}
	dir := ShellDir + "/" + session
	id, marker := "c-"+randomHex(8), newMarker()
	line, sync, init := ShellLines(dir, id, marker)
	length, reset := len(opts.Script), "0"
	if opts.NoScript {
		length = -1
	}
	if opts.Reset {
		reset = "1"
	}
	// The exec's watchdog is only a safety net: the call enforces the timeout itself, so
	// that it can interrupt without killing the shell.
	var safety time.Duration
	if opts.Timeout > 0 {
		safety = opts.Timeout + wait + 30*time.Second
	}
	// Stdin carries the script, then stays open until the call ends: its EOF tells the
	// call that sbx went away.
	done := make(chan struct{})
	defer close(done)
	stdout := &trailerWriter{w: sandbox.OrDiscard(opts.Stdout), marker: []byte(marker)}
	res, err := x.Exec(ctx, sb, sandbox.ExecOptions{
		Cmd: sb.Script(shellCall, "sbx-sh", dir, id, marker, strconv.FormatInt(opts.Timeout.Milliseconds(), 10),
			strconv.FormatFloat(wait.Seconds(), 'f', 3, 64), reset, strconv.Itoa(length), line, sync, init, shellSupervisor),
		Env: opts.Env, WorkDir: opts.WorkDir, Interactive: true, Timeout: safety, Outlive: true,
		Stdin:  io.MultiReader(bytes.NewReader(opts.Script), &blockingReader{done: done}),
		Stdout: stdout, Stderr: sandbox.OrDiscard(opts.Stderr),
	})
	if err != nil {
		return nil, err
	}
	fields, ok := stdout.finish()
	if res.Canceled {
		return &ShellResult{Canceled: true, ExitCode: errs.CodeInterrupted, Duration: res.Duration}, nil
	}
	if !ok && res.SandboxKilled {
		// The OOM kill took the sandbox (gVisor, or runc's agent): every shell went with it.
		return nil, errs.New(fmt.Errorf("shell session %q of sandbox %q: killed: out of memory, limit %s; the sandbox stopped with everything in it, its shells too, and the next call starts it again",
			session, sb.Name, config.FormatSize(res.MemoryLimit)), 137,
			"raise memory if the script needs more: the sandbox was made with this limit (sbx create -n NAME --replace --memory SIZE)")
	}
	if !ok {
		return nil, errs.Failure(fmt.Errorf("shell session %q of sandbox %q: the call ended without reporting a status (exit %d)", session, sb.Name, res.ExitCode),
			"run it again; a shell that went away is replaced by the next call")
	}
	return shellResult(sb.Name, session, fields, wait, res.Duration)
}

// shellResult reads the trailer's fields.
func shellResult(sandbox, session string, fields map[string]string, wait, took time.Duration) (*ShellResult, error) {
	if fields["busy"] == "1" {
		return nil, &ShellBusyError{Sandbox: sandbox, Session: session, Waited: wait}
	}
	if e := fields["err"]; e != "" {
		return nil, errs.Failure(fmt.Errorf("shell session %q of sandbox %q could not %s", session, sandbox, map[string]string{
			"save": "save the script", "lock": "open its lock", "flock": "lock it", "mkfifo": "make its command pipe", "start": "start its shell"}[e]),
			"the image needs bash, flock and setsid (util-linux), as the bundled ones have, and room on /tmp")
	}
	out := &ShellResult{TimedOut: fields["to"] == "1", Duration: took}
	code, err := strconv.Atoi(fields["rc"])
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("shell session %q: bad status %q", session, fields["rc"]), "")
	}
	out.ExitCode = code
	switch start := fields["start"]; {
	case start == "new", start == "reset":
		out.Started = start
	case strings.HasPrefix(start, "died:"):
		out.Started, out.PrevExit = "replaced", strings.TrimPrefix(start, "died:")
	}
	switch end := fields["end"]; {
	case strings.HasPrefix(end, "died:"):
		out.ShellExited = true
	case end == "killed":
		out.ShellKilled = true
	}
	return out, nil
}

// ShellLines returns the command line that runs call id of session dir, the line that
// records its status when SIGINT abandoned the first, and a new shell's first line.
func ShellLines(dir, id, marker string) (line, sync, init string) {
	f := dir + "/" + id
	status := func(code string) string {
		return `\builtin printf "%s ` + marker + `\n" ` + code + ` >>` + f + `.st`
	}
	line = `PROMPT_COMMAND='` + status(`"$?"`) + `'; \builtin \. ` + f + `.sh </dev/null >` + f + `.out 2>` + f + `.err; ` + status(`"$?"`)
	sync = status("130")
	init = `PS1= PS2= PS0= PS4='+ ' PROMPT_COMMAND=; unset HISTFILE; set +o history +H; \builtin printf "%s %s\n" "$$" "$EPOCHREALTIME" >` + dir + `/pid.new`
	return line, sync, init
}

// ShellSession is a session as Sessions reports it.
type ShellSession struct {
	Name string
	// State is "idle", "busy" (a call runs) or "exited" (its shell ended; the next call
	// starts a new one).
	State     string
	PID       int
	Cwd       string
	StartedAt time.Time
	LastUsed  time.Time // zero when never used
}

// Sessions lists the shell sessions of sandbox sb, by name.
func Sessions(ctx context.Context, x Execer, sb *sandbox.Sandbox) ([]ShellSession, error) {
	l := listing[ShellSession]{script: shellList, name: "shell session list", things: "shell sessions", limit: MaxShellList, parse: ParseSessions}
	return l.list(ctx, x, sb, nil, ShellDir)
}

// ParseSessions reads shellList's output.
func ParseSessions(s string) ([]ShellSession, error) {
	var list []ShellSession
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 6)
		if len(f) != 6 || !sessionPattern().MatchString(f[0]) {
			return nil, fmt.Errorf("reading the session list: bad line %s", excerpt(line))
		}
		ss := ShellSession{Name: f[0], State: f[1], Cwd: f[5], StartedAt: epochTime(f[3])}
		ss.PID, _ = strconv.Atoi(f[2])
		if secs, err := strconv.ParseInt(f[4], 10, 64); err == nil {
			ss.LastUsed = time.Unix(secs, 0).UTC()
		}
		list = append(list, ss)
	}
	return list, nil
}

// trailerWriter passes a call's stdout through, holding back its last bytes, which may be
// the trailer "MARKER fields\n" that the call ends with; finish strips and reads it.
type trailerWriter struct {
	w      io.Writer
	marker []byte
	held   []byte
	err    error
}

// trailerRoom is the most a trailer takes after its marker.
const trailerRoom = 256

func (t *trailerWriter) Write(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	t.held = append(t.held, p...)
	if keep := len(t.marker) + trailerRoom; len(t.held) > 2*keep {
		n := len(t.held) - keep
		if _, err := t.w.Write(t.held[:n]); err != nil {
			t.err = err
			return 0, err
		}
		t.held = append(t.held[:0], t.held[n:]...)
	}
	return len(p), nil
}

// finish writes what remains before the trailer and returns the trailer's fields; without
// a well-formed trailer at the very end, everything is output and ok is false.
func (t *trailerWriter) finish() (map[string]string, bool) {
	out, fields, ok := SplitTrailer(t.held, t.marker)
	if t.err == nil && len(out) > 0 {
		_, t.err = t.w.Write(out)
	}
	t.held = nil
	return fields, ok
}

// SplitTrailer splits the end of a call's stdout into the output and the fields of its
// trailer, which must be the last line and start with marker. It is pure.
func SplitTrailer(b, marker []byte) ([]byte, map[string]string, bool) {
	i := bytes.LastIndex(b, marker)
	if i < 0 || !bytes.HasSuffix(b, []byte("\n")) || bytes.IndexByte(b[i:], '\n') != len(b)-i-1 {
		return b, nil, false
	}
	rest := strings.TrimSuffix(string(b[i+len(marker):]), "\n")
	if rest != "" && !strings.HasPrefix(rest, " ") {
		return b, nil, false
	}
	fields := map[string]string{}
	for _, kv := range strings.Fields(rest) {
		k, v, _ := strings.Cut(kv, "=")
		fields[k] = v
	}
	return b[:i], fields, true
}

// blockingReader returns nothing until done is closed, then EOF.
type blockingReader struct{ done <-chan struct{} }

func (b *blockingReader) Read([]byte) (int, error) {
	<-b.done
	return 0, io.EOF
}

func newMarker() string { return "sbx-" + randomHex(16) }
