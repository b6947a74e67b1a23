// Package proc owns the processes that outlive one call in a sandbox: background processes
// ("sbx exec -d", sbx ps, logs and kill, the MCP process tools) and shell sessions ("sbx sh",
// the MCP shell tool), each kept by sbx's own scripts (scripts/) on the sandbox's /tmp, so
// that it ends with the sandbox. Of the lifecycle it needs one thing, a command run in a
// started sandbox (Execer); pkg/sandbox knows nothing of it.
package proc

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/internal/lazyre"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Execer runs a command in a started sandbox: sandbox.Manager does.
type Execer interface {
	Exec(ctx context.Context, sb *sandbox.Sandbox, opts sandbox.ExecOptions) (*sandbox.ExecResult, error)
}

// Background processes ("sbx exec -d") live under Dir/ID on the sandbox's /tmp tmpfs, so
// they and their output outlast the sbx that started them but not the sandbox:
//
//	meta                      the command, user, directory and limits: one JSON line from sbx
//	chunk                     the size of an output chunk, OutputCap/4
//	pid                       "PID START SUPERVISOR": the command's process group, its start
//	stdout.n, stderr.n        the number of the chunk being written
//	stdout.0..3, stderr.0..3  the ring of chunks; chunk N is in slot N mod 4
//	timedout                  present when its timeout ended it
//	exit                      "CODE END", written last, once all its output is in the ring
//	supervisor.log            what the supervisor itself said on stderr, if anything
const Dir = "/tmp/.sbx-proc"

// OutputCap bounds what a background process keeps of each output stream. Output goes
// through a ring of four chunks, so between three quarters of this and all of it, the newest,
// is kept; the oldest chunk is dropped first.
const OutputCap = 1 << 20

const procChunks = 4

// procScript is sbx's exec wrapper's launcher (sandbox.ExecOptions.Launcher): as sbx-launch it
// starts a background process under a supervisor, and as sbx-proc it is that supervisor. See
// scripts/proc_launch.sh.
//
//go:embed scripts/proc_launch.sh
var procScript string

// procList lists the background processes: see scripts/proc_list.sh.
//
//go:embed scripts/proc_list.sh
var procList string

// procLogs writes what a background process kept of its output: see scripts/proc_logs.sh.
//
//go:embed scripts/proc_logs.sh
var procLogs string

// procKill signals a background process: see scripts/proc_kill.sh.
//
//go:embed scripts/proc_kill.sh
var procKill string

// killPoll is how often procKill looks for the process's exit.
const killPoll = 200 * time.Millisecond

// Options describe a background process.
type Options struct {
	Cmd     []string
	Env     []string
	WorkDir string
	User    string
	// Timeout ends the process (TERM, then KILL) when it runs longer; 0 means never.
	Timeout time.Duration
}

// Proc is a background process as the sandbox records it.
type Proc struct {
	ID      string
	Command []string
	User    string
	WorkDir string
	Timeout time.Duration
	PID     int
	// State is "running", "exited", or "lost" when its supervisor vanished without recording
	// an exit status (killed from outside).
	State     string
	ExitCode  int // valid when State is "exited"
	TimedOut  bool
	StartedAt time.Time
	EndedAt   time.Time // zero while running
	// DroppedStdout and DroppedStderr count the oldest bytes dropped from the ring.
	DroppedStdout, DroppedStderr int64
}

// Duration is how long the process ran, or has run until now.
func (p *Proc) Duration(now time.Time) time.Duration {
	switch {
	case p.StartedAt.IsZero():
		return 0
	case !p.EndedAt.IsZero():
		return p.EndedAt.Sub(p.StartedAt)
	}
	return now.Sub(p.StartedAt)
}

// Status describes the state in words: "running", "exited with code 0", "timed out (exit
// code 143)" or "lost (...)".
func (p *Proc) Status() string {
	switch {
	case p.State == "exited" && p.TimedOut:
		return fmt.Sprintf("timed out (exit code %d)", p.ExitCode)
	case p.State == "exited":
		return fmt.Sprintf("exited with code %d", p.ExitCode)
	case p.State == "lost":
		return "lost (its supervisor ended without recording an exit status)"
	}
	return p.State
}

// procMeta is the metadata line sbx writes when it starts a process.
type procMeta struct {
	Command   []string `json:"command"`
	User      string   `json:"user,omitempty"`
	WorkDir   string   `json:"workdir,omitempty"`
	TimeoutMs int64    `json:"timeoutMs,omitempty"`
}

// NotFoundError is a process ID the sandbox does not know.
type NotFoundError struct{ Sandbox, ID string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no process %q in sandbox %q", e.ID, e.Sandbox)
}

// Hint says where to find the IDs.
func (e *NotFoundError) Hint() string {
	return fmt.Sprintf("list them with \"sbx ps -n %s\"; processes end, and their records go, when the sandbox stops", e.Sandbox)
}

// IsNotFound reports whether err says a background process does not exist.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}

var procIDPattern = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID checks a process ID given by a user before it becomes part of a path.
func ValidID(id string) error {
	if !procIDPattern().MatchString(id) {
		return errs.Usagef("bad process ID %q: IDs are letters, digits, - and _ (sbx ps lists them)", id)
	}
	return nil
}

// Start starts opts.Cmd in sandbox sb as a background process and returns its ID once it
// runs. A command that is not found is an error with exit code 127.
func Start(ctx context.Context, x Execer, sb *sandbox.Sandbox, opts Options) (string, error) {
	if len(opts.Cmd) == 0 {
		return "", errs.Usagef("no command given")
	}
	meta, err := json.Marshal(procMeta{Command: opts.Cmd, User: opts.User, WorkDir: opts.WorkDir, TimeoutMs: opts.Timeout.Milliseconds()})
	if err != nil {
		return "", err
	}
	for attempt := 0; attempt < 5; attempt++ {
		id := newProcID()
		var stderr strings.Builder
		res, err := x.Exec(ctx, sb, sandbox.ExecOptions{
			Cmd: opts.Cmd, Env: opts.Env, WorkDir: opts.WorkDir, User: opts.User, Timeout: opts.Timeout,
			Stdin:  strings.NewReader(fmt.Sprintf("%s/%s %d\n%s\n", Dir, id, OutputCap/procChunks, meta)),
			Stdout: io.Discard, Stderr: &sandbox.CapWriter{W: &stderr, Limit: sandbox.MaxQuoted}, Launcher: procScript,
		})
		if err != nil {
			return "", err
		}
		switch res.ExitCode {
		case 0:
			return id, nil
		case 3:
			continue // the ID is taken
		case errs.CodeNotFound:
			return "", errs.New(fmt.Errorf("%s: command not found in sandbox %q", opts.Cmd[0], sb.Name), errs.CodeNotFound, "")
		}
		return "", errs.Failure(fmt.Errorf("starting %q in sandbox %q: %s (exit %d)", strings.Join(opts.Cmd, " "), sb.Name, strings.TrimSpace(stderr.String()), res.ExitCode), "")
	}
	return "", errs.Failure(errors.New("could not pick an unused process ID"), "")
}

// List lists the background processes of sandbox sb, oldest first.
func List(ctx context.Context, x Execer, sb *sandbox.Sandbox) ([]Proc, error) {
	return procs(ctx, x, sb, "")
}

// Get returns one background process, or a *NotFoundError.
func Get(ctx context.Context, x Execer, sb *sandbox.Sandbox, id string) (*Proc, error) {
	list, err := procs(ctx, x, sb, id)
	if err != nil {
		return nil, err
	}
	return &list[0], nil
}

func procs(ctx context.Context, x Execer, sb *sandbox.Sandbox, id string) ([]Proc, error) {
	if id != "" {
		if err := ValidID(id); err != nil {
			return nil, err
		}
	}
	l := listing[Proc]{script: procList, name: "process list", things: "processes", limit: MaxList, parse: ParseList}
	return l.list(ctx, x, sb, &NotFoundError{Sandbox: sb.Name, ID: id}, Dir, strconv.Itoa(MaxMeta), id)
}

// ParseList reads procList's output.
func ParseList(s string) ([]Proc, error) {
	var list []Proc
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 11)
		if len(f) != 11 || !procIDPattern().MatchString(f[0]) {
			return nil, fmt.Errorf("reading the process list: bad line %s", excerpt(line))
		}
		p := Proc{ID: f[0], State: "running"}
		p.PID, _ = strconv.Atoi(f[1])
		p.StartedAt = epochTime(f[2])
		switch {
		case f[3] != "":
			p.State = "exited"
			p.ExitCode, _ = strconv.Atoi(f[3])
			p.EndedAt = epochTime(f[4])
		case f[6] != "1":
			p.State = "lost"
		}
		p.TimedOut = f[5] == "1"
		chunk, _ := strconv.ParseInt(f[9], 10, 64)
		p.DroppedStdout = droppedBytes(f[7], chunk)
		p.DroppedStderr = droppedBytes(f[8], chunk)
		var meta procMeta
		if err := json.Unmarshal([]byte(f[10]), &meta); err == nil {
			p.Command, p.User, p.WorkDir = meta.Command, meta.User, meta.WorkDir
			p.Timeout = time.Duration(meta.TimeoutMs) * time.Millisecond
		}
		list = append(list, p)
	}
	// Oldest first; IDs are random, so order by start time.
	slices.SortStableFunc(list, func(a, b Proc) int { return a.StartedAt.Compare(b.StartedAt) })
	return list, nil
}

func droppedBytes(current string, chunk int64) int64 {
	n, _ := strconv.ParseInt(current, 10, 64)
	if n < procChunks {
		return 0
	}
	return (n - procChunks + 1) * chunk
}

// LogsOptions select what Logs shows.
type LogsOptions struct {
	Follow bool // keep showing output until the process has exited
	Tail   int  // only the last Tail lines of each stream; < 0 means all
	Stdout io.Writer
	Stderr io.Writer
}

// Logs writes what process id kept of its output to opts.Stdout and opts.Stderr. Following
// ends when the process has exited and its output is shown, or when ctx ends.
func Logs(ctx context.Context, x Execer, sb *sandbox.Sandbox, id string, opts LogsOptions) error {
	if err := ValidID(id); err != nil {
		return err
	}
	follow := "0"
	if opts.Follow {
		follow = "1"
	}
	res, err := x.Exec(ctx, sb, sandbox.ExecOptions{
		Cmd:    sb.Script(procLogs, "sbx-logs", Dir+"/"+id, follow, strconv.Itoa(opts.Tail)),
		Stdout: sandbox.OrDiscard(opts.Stdout), Stderr: sandbox.OrDiscard(opts.Stderr),
	})
	switch {
	case err != nil:
		return err
	case res.Canceled:
		return ctx.Err()
	case res.ExitCode == 3:
		return &NotFoundError{Sandbox: sb.Name, ID: id}
	case res.ExitCode != 0:
		return errs.Failure(fmt.Errorf("reading the output of process %q: exit %d", id, res.ExitCode), "")
	}
	return nil
}

// AlreadyExitedError is a signal for a process that has ended.
type AlreadyExitedError struct{ ID string }

func (e *AlreadyExitedError) Error() string {
	return fmt.Sprintf("process %q has already exited", e.ID)
}

// terminating are the signals whose default action ends a process; Kill waits for the
// process to exit after sending one of them.
var terminating = map[string]bool{"HUP": true, "INT": true, "QUIT": true, "KILL": true, "TERM": true, "ALRM": true, "USR1": true, "USR2": true}

var signalNames = map[string]bool{"HUP": true, "INT": true, "QUIT": true, "KILL": true, "TERM": true, "ALRM": true, "USR1": true,
	"USR2": true, "STOP": true, "CONT": true, "TSTP": true, "WINCH": true, "PIPE": true}

// ParseSignal accepts a signal name with or without SIG (any case) or a number from 1 to 64,
// and returns it in the form bash's kill takes.
func ParseSignal(s string) (string, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")
	if signalNames[name] {
		return name, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 1 && n <= 64 {
		return strconv.Itoa(n), nil
	}
	return "", errs.Usagef("unknown signal %q", s).WithHint("use a name such as TERM, KILL, INT, HUP, USR1 or a number")
}

// Kill sends sig (as ParseSignal returns it) to the whole process group of process id. After
// a signal that ends processes by default it waits for the process to exit, up to the kill
// grace period and a little more, and returns the process as it is then.
func Kill(ctx context.Context, x Execer, sb *sandbox.Sandbox, id, sig string) (*Proc, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	how := "-s"
	n, numeric := strconv.Atoi(sig)
	if numeric == nil {
		how = "-n"
	}
	wait := 0
	if terminating[sig] || (numeric == nil && n <= 15 && n != 13) {
		wait = int((sandbox.KillGrace + 3*time.Second) / killPoll)
	}
	var stderr strings.Builder
	res, err := x.Exec(ctx, sb, sandbox.ExecOptions{
		Cmd:    sb.Script(procKill, "sbx-kill", Dir+"/"+id, how, sig, strconv.Itoa(wait)),
		Stdout: io.Discard, Stderr: &sandbox.CapWriter{W: &stderr, Limit: sandbox.MaxQuoted}, Timeout: time.Duration(wait)*killPoll + 10*time.Second,
	})
	switch {
	case err != nil:
		return nil, err
	case res.ExitCode == 3:
		return nil, &NotFoundError{Sandbox: sb.Name, ID: id}
	case res.ExitCode == 4:
		return nil, &AlreadyExitedError{ID: id}
	case res.ExitCode != 0:
		return nil, errs.Failure(fmt.Errorf("signalling process %q: %s", id, strings.TrimSpace(stderr.String())), "")
	}
	return Get(ctx, x, sb, id)
}

func newProcID() string { return randomHex(3) }
