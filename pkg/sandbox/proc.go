package sandbox

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Background processes ("sbx exec -d") live under ProcDir/ID on the sandbox's /tmp tmpfs, so
// they and their output outlast the sbx that started them but not the sandbox:
//
//	meta                      the command, user, directory and limits: one JSON line from sbx
//	chunk                     the size of an output chunk, ProcOutputCap/4
//	pid                       "PID START SUPERVISOR": the command's process group, its start
//	stdout.n, stderr.n        the number of the chunk being written
//	stdout.0..3, stderr.0..3  the ring of chunks; chunk N is in slot N mod 4
//	timedout                  present when its timeout ended it
//	exit                      "CODE END", written last, once all its output is in the ring
//	supervisor.log            what the supervisor itself said on stderr, if anything
const ProcDir = "/tmp/.sbx-proc"

// ProcOutputCap bounds what a background process keeps of each output stream. Output goes
// through a ring of four chunks, so between three quarters of this and all of it, the newest,
// is kept; the oldest chunk is dropped first.
const ProcOutputCap = 1 << 20

const procChunks = 4

// procScript is the wrapper's detached mode. As sbx-launch, the exec's own process, it reads
// "ID CHUNK" and the metadata line from stdin, creates the process's directory, starts the
// supervisor in a session of its own and returns once the command runs. As sbx-proc it is
// that supervisor: it starts the command in a new session (its own process group), feeds
// each output stream through a rotation loop into the chunk ring (head -c never reads past a
// chunk's end, and unbuffered it writes what it reads at once), enforces a timeout when one
// is given, and when the command ends it terminates what is left of its group (TERM, then
// KILL after the grace period) and records the exit status. Nothing watches stdin, so the
// process lives on after the client goes.
const procScript = `if [ "$0" = sbx-launch ]; then
	ticks=$1 grace=$2; shift 2
	if ! { read -r id chunk && IFS= read -r meta; }; then echo "sbx: no process parameters on stdin" >&2; exit 125; fi
	r=` + ProcDir + ` p=` + ProcDir + `/$id
	mkdir -m 1777 "$r" 2>/dev/null
	if ! mkdir -m 0755 -- "$p"; then [ -e "$p" ] && exit 3; exit 125; fi
	printf '%s\n' "$chunk" >"$p/chunk"; printf '%s\n' "$meta" >"$p/meta"
	setsid bash -c "$BASH_EXECUTION_STRING" sbx-proc "$p" "$ticks" "$grace" "$chunk" "$@" </dev/null >/dev/null 2>"$p/supervisor.log" &
	i=0; while [ ! -s "$p/pid" ] && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i+1)); done
	[ -s "$p/pid" ] && exit 0
	echo "sbx: the process did not start" >&2; exit 125
fi
p=$1 ticks=$2 grace=$3 chunk=$4; shift 4
mkfifo "$p/.out" "$p/.err" "$p/.tick" || exit 1
exec 3<>"$p/.tick"
nap() { read -r -t "$1" -u 3 _; }
rot() {
	local n=0 f sz fails=0
	while :; do
		f=$p/$1.$((n % 4))
		: >"$f"; printf '%s\n' "$n" >"$p/$1.n"
		if ! stdbuf -o0 head -c "$chunk" >>"$f"; then
			fails=$((fails+1)); [ "$fails" -ge 5 ] && { cat >/dev/null; return; }
			nap 1; continue
		fi
		fails=0
		sz=$(stat -c %s -- "$f") || sz=0
		[ "$sz" -lt "$chunk" ] && return
		n=$((n+1))
	done
}
rot stdout <"$p/.out" & ro=$!
rot stderr <"$p/.err" & re=$!
setsid -- "$@" </dev/null >"$p/.out" 2>"$p/.err" 3<&- & c=$!
printf '%s %s %s\n' "$c" "$EPOCHREALTIME" "$$" >"$p/pid"
tm=
if [ "$ticks" -gt 0 ]; then
	( nap "$((ticks / 5)).$((ticks % 5 * 2))"; : >"$p/timedout"; kill -TERM -- "-$c" 2>/dev/null
	  nap "$((grace / 5))"; kill -KILL -- "-$c" 2>/dev/null ) & tm=$!
fi
wait "$c"; rc=$?
end=$EPOCHREALTIME
[ -n "$tm" ] && kill "$tm" 2>/dev/null
if kill -TERM -- "-$c" 2>/dev/null; then
	n=0; while [ "$n" -lt "$grace" ] && kill -0 -- "-$c" 2>/dev/null; do nap 0.2; n=$((n+1)); done
	kill -KILL -- "-$c" 2>/dev/null
fi
( nap 2; kill "$ro" "$re" 2>/dev/null ) & k=$!
wait "$ro" "$re"
kill "$k" 2>/dev/null
printf '%s %s\n' "$rc" "$end" >"$p/exit"`

// procList lists the background processes: see scripts/proc_list.sh.
//
//go:embed scripts/proc_list.sh
var procList string

// procLogs writes what process $1 kept of its stdout and stderr to its own stdout and stderr:
// the last $3 lines of each when $3 >= 0, and with $2 = 1 it then follows both until the
// process has exited and all its output is shown. Output dropped from the ring while it
// follows is skipped.
const procLogs = `p=` + ProcDir + `/$1 follow=$2 tail=$3
[ -e "$p/meta" ] || exit 3
read -r chunk 2>/dev/null <"$p/chunk"
declare -A pos=([stdout]=0 [stderr]=0)
total() { local n= sz; read -r n 2>/dev/null <"$p/$1.n"; tot=0
	[ -n "$n" ] || return 0
	sz=$(stat -c %s -- "$p/$1.$((n % 4))" 2>/dev/null) || sz=0
	tot=$((n * chunk + sz)); }
emit() { local g=${pos[$1]} n= k off e
	read -r n 2>/dev/null <"$p/$1.n"; [ -n "$n" ] || return 0
	[ "$n" -gt 3 ] && [ "$g" -lt $(( (n - 3) * chunk )) ] && g=$(( (n - 3) * chunk ))
	while [ "$g" -lt "$3" ]; do
		k=$((g / chunk)) off=$((g % chunk))
		e=$(( $3 - k * chunk )); [ "$e" -gt "$chunk" ] && e=$chunk
		tail -c "+$((off + 1))" -- "$p/$1.$((k % 4))" | head -c "$((e - off))" >&"$2"
		g=$((k * chunk + e))
	done
	pos[$1]=$g; }
fin=0; [ -e "$p/exit" ] && fin=1
total stdout; lo=$tot; total stderr; le=$tot
if [ "$tail" -ge 0 ]; then
	emit stdout 1 "$lo" | tail -n "$tail"
	emit stderr 1 "$le" | tail -n "$tail" >&2
else
	emit stdout 1 "$lo"; emit stderr 2 "$le"
fi
pos[stdout]=$lo pos[stderr]=$le
[ "$follow" = 1 ] || exit 0
while [ "$fin" = 0 ]; do
	sleep 0.25
	[ -e "$p/exit" ] && fin=1
	total stdout; emit stdout 1 "$tot"
	total stderr; emit stderr 2 "$tot"
done
exit 0`

// procKill sends signal $3 ($2 is -s or -n) to the process group of process $1 and waits up
// to $4 ticks for it to exit. It exits 3 when there is no such process, 4 when it has
// already exited.
const procKill = `p=` + ProcDir + `/$1
[ -e "$p/meta" ] || exit 3
[ -e "$p/exit" ] && exit 4
pid=; read -r pid _ 2>/dev/null <"$p/pid"
[ -n "$pid" ] || exit 4
kill "$2" "$3" -- "-$pid" || exit 1
i=0; while [ ! -e "$p/exit" ] && [ "$i" -lt "$4" ]; do sleep 0.2; i=$((i+1)); done
exit 0`

// ProcOptions describe a background process.
type ProcOptions struct {
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

// ProcNotFoundError is a process ID the sandbox does not know.
type ProcNotFoundError struct{ Sandbox, ID string }

func (e *ProcNotFoundError) Error() string {
	return fmt.Sprintf("no process %q in sandbox %q", e.ID, e.Sandbox)
}

// Hint says where to find the IDs.
func (e *ProcNotFoundError) Hint() string {
	return fmt.Sprintf("list them with \"sbx ps -n %s\"; processes end, and their records go, when the sandbox stops", e.Sandbox)
}

// IsProcNotFound reports whether err says a background process does not exist.
func IsProcNotFound(err error) bool {
	var nf *ProcNotFoundError
	return errors.As(err, &nf)
}

var procIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidProcID checks a process ID given by a user before it becomes part of a path.
func ValidProcID(id string) error {
	if !procIDPattern.MatchString(id) {
		return errs.Usagef("bad process ID %q: IDs are letters, digits, - and _ (sbx ps lists them)", id)
	}
	return nil
}

// StartProc starts opts.Cmd in sandbox sb as a background process and returns its ID once it
// runs. A command that is not found is an error with exit code 127.
func (m *Manager) StartProc(ctx context.Context, sb *Sandbox, opts ProcOptions) (string, error) {
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
		res, err := m.Exec(ctx, sb, ExecOptions{
			Cmd: opts.Cmd, Env: opts.Env, WorkDir: opts.WorkDir, User: opts.User, Timeout: opts.Timeout,
			Stdin:  strings.NewReader(fmt.Sprintf("%s %d\n%s\n", id, ProcOutputCap/procChunks, meta)),
			Stdout: io.Discard, Stderr: &CapWriter{W: &stderr, Limit: maxQuoted}, detach: true,
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

// Procs lists the background processes of sandbox sb, oldest first.
func (m *Manager) Procs(ctx context.Context, sb *Sandbox) ([]Proc, error) {
	return m.procs(ctx, sb, "")
}

// Proc returns one background process, or a *ProcNotFoundError.
func (m *Manager) Proc(ctx context.Context, sb *Sandbox, id string) (*Proc, error) {
	list, err := m.procs(ctx, sb, id)
	if err != nil {
		return nil, err
	}
	return &list[0], nil
}

func (m *Manager) procs(ctx context.Context, sb *Sandbox, id string) ([]Proc, error) {
	if id != "" {
		if err := ValidProcID(id); err != nil {
			return nil, err
		}
	}
	out := &LimitedBuffer{What: fmt.Sprintf("the process list of sandbox %q", sb.Name), Limit: MaxProcList}
	code, err := m.script(ctx, sb, procList, []string{ProcDir, strconv.Itoa(MaxProcMeta), id}, nil, out)
	if err != nil {
		return nil, err
	}
	if code == 3 {
		return nil, &ProcNotFoundError{Sandbox: sb.Name, ID: id}
	}
	if code != 0 {
		return nil, errs.Failure(fmt.Errorf("listing the processes of sandbox %q: exit %d", sb.Name, code), "")
	}
	return ParseProcList(out.String())
}

// ParseProcList reads procList's output.
func ParseProcList(s string) ([]Proc, error) {
	var list []Proc
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 11)
		if len(f) != 11 || !procIDPattern.MatchString(f[0]) {
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

// epochTime parses bash's $EPOCHREALTIME: seconds, a point, microseconds.
func epochTime(s string) time.Time {
	secs, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || sec <= 0 || len(frac) > 9 {
		return time.Time{}
	}
	nsec, err := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(sec, nsec).UTC()
}

func droppedBytes(current string, chunk int64) int64 {
	n, _ := strconv.ParseInt(current, 10, 64)
	if n < procChunks {
		return 0
	}
	return (n - procChunks + 1) * chunk
}

// LogsOptions select what ProcLogs shows.
type LogsOptions struct {
	Follow bool // keep showing output until the process has exited
	Tail   int  // only the last Tail lines of each stream; < 0 means all
	Stdout io.Writer
	Stderr io.Writer
}

// ProcLogs writes what process id kept of its output to opts.Stdout and opts.Stderr.
// Following ends when the process has exited and its output is shown, or when ctx ends.
func (m *Manager) ProcLogs(ctx context.Context, sb *Sandbox, id string, opts LogsOptions) error {
	if err := ValidProcID(id); err != nil {
		return err
	}
	follow := "0"
	if opts.Follow {
		follow = "1"
	}
	res, err := m.Exec(ctx, sb, ExecOptions{
		Cmd:    []string{"bash", "-c", procLogs, "sbx-logs", id, follow, strconv.Itoa(opts.Tail)},
		Stdout: orDiscard(opts.Stdout), Stderr: orDiscard(opts.Stderr),
	})
	switch {
	case err != nil:
		return err
	case res.Canceled:
		return ctx.Err()
	case res.ExitCode == 3:
		return &ProcNotFoundError{Sandbox: sb.Name, ID: id}
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

// terminating are the signals whose default action ends a process; KillProc waits for the
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

// KillProc sends sig (as ParseSignal returns it) to the whole process group of process id.
// After a signal that ends processes by default it waits for the process to exit, up to the
// kill grace period and a little more, and returns the process as it is then.
func (m *Manager) KillProc(ctx context.Context, sb *Sandbox, id, sig string) (*Proc, error) {
	if err := ValidProcID(id); err != nil {
		return nil, err
	}
	how := "-s"
	n, numeric := strconv.Atoi(sig)
	if numeric == nil {
		how = "-n"
	}
	wait := 0
	if terminating[sig] || (numeric == nil && n <= 15 && n != 13) {
		wait = int((KillGrace + 3*time.Second) / tick)
	}
	var stderr strings.Builder
	res, err := m.Exec(ctx, sb, ExecOptions{
		Cmd:    []string{"bash", "-c", procKill, "sbx-kill", id, how, sig, strconv.Itoa(wait)},
		Stdout: io.Discard, Stderr: &CapWriter{W: &stderr, Limit: maxQuoted}, Timeout: time.Duration(wait)*tick + 10*time.Second,
	})
	switch {
	case err != nil:
		return nil, err
	case res.ExitCode == 3:
		return nil, &ProcNotFoundError{Sandbox: sb.Name, ID: id}
	case res.ExitCode == 4:
		return nil, &AlreadyExitedError{ID: id}
	case res.ExitCode != 0:
		return nil, errs.Failure(fmt.Errorf("signalling process %q: %s", id, strings.TrimSpace(stderr.String())), "")
	}
	return m.Proc(ctx, sb, id)
}

// script runs one of sbx's bash snippets in sb under the usual exec watchdog, with stdin when
// given, and returns its exit code. Its stderr is returned inside the error when it fails to
// run at all.
func (m *Manager) script(ctx context.Context, sb *Sandbox, script string, args []string, stdin io.Reader, stdout io.Writer) (int, error) {
	res, err := m.Exec(ctx, sb, ExecOptions{
		Cmd:         append([]string{"bash", "-c", script, "sbx-script"}, args...),
		Interactive: stdin != nil, Stdin: stdin, Stdout: stdout, Stderr: io.Discard, Timeout: time.Minute,
	})
	if err != nil {
		return 0, err
	}
	if res.Canceled {
		return 0, ctx.Err()
	}
	return res.ExitCode, nil
}

func newProcID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
