// Package shim is the agent's helper that starts a command: the sbx binary started again by
// the agent (pkg/agent/agentd) with Mode as its first argument, in the command's session,
// with its stdio and environment. It sets what Go cannot set between fork and exec (the
// command is a child subreaper), then execs the command in place, so the command keeps the
// pid the agent knows.
//
// It runs from this package's init, before most of sbx is initialised, and costs every
// command its start: Go initialises a package once its imports are, taking the ready ones in
// the order of their import paths, so each import here would first let every ready package
// that sorts before this one (the engine client's, the CLI's) initialise. It imports only
// syscall, ready at once, and reads its arguments from /proc/self/cmdline rather than from os.
package shim

// Mode is the first argument that makes the sbx binary the shim.
const Mode = "__agent-shim"

// Marker is in the environment the agent starts its shim with, so that every other start of
// sbx knows it is not the shim without reading its command line (half a millisecond of each
// start). The command line still decides. The shim takes MarkerName out of the command's
// environment, so a command never sees one, even one it was given.
const (
	MarkerName = "SBX_AGENT_SHIM"
	Marker     = MarkerName + "=1"
)

// Report is the descriptor the shim reports on, a SOCK_SEQPACKET socket: Ready once its
// runtime runs, then, when the command cannot start, errno\0text (\0exec when its exec
// failed). The shim execs the command only once the agent sent Go there. The exec closes it,
// so the agent reads an end of file after Ready when the command started, and before Ready
// when the shim itself could not start.
const Report = 3

// Spare is the argument after Mode that makes the shim a spare: started ahead of the next
// command, it waits for that command's request on Report, a SOCK_SEQPACKET socket, so the
// command does not wait for a Go runtime to start.
const Spare = "spare"

// Ready is the shim's first word on Report.
const Ready = "ready"

// Go is the agent's word on Report that lets the shim exec the command: the agent has told
// its client the command's pid.
const Go = "go"

// MaxRequest bounds a spare's request; a longer command line starts the shim the usual way.
const MaxRequest = 64 << 10

// Request is a command for a spare shim; its stdio (or terminal, three times) comes with it
// as SCM_RIGHTS.
type Request struct {
	Reap bool // make the command a child subreaper
	TTY  bool // make its stdin its controlling terminal
	Cwd  string
	Argv []string
	Env  []string
}

// The bits of a request's first field.
const (
	reapBit = 1
	ttyBit  = 2
)

// Encode is r as one message of NUL-ended fields: reapBit and ttyBit (in decimal), the
// working directory, the number of arguments, the arguments, and the environment.
func (r Request) Encode() []byte {
	bits := 0
	if r.Reap {
		bits |= reapBit
	}
	if r.TTY {
		bits |= ttyBit
	}
	b := append(itoa(nil, bits), 0)
	b = append(append(b, r.Cwd...), 0)
	b = append(itoa(b, len(r.Argv)), 0)
	for _, list := range [][]string{r.Argv, r.Env} {
		for _, s := range list {
			b = append(append(b, s...), 0)
		}
	}
	return b
}

type request struct {
	reap, tty bool
	cwd       string
	argv, env []string
}

// parseRequest is Encode's inverse; it refuses anything Encode cannot make, and a command
// without arguments.
func parseRequest(b []byte) (request, bool) {
	var r request
	fields := split(b)
	if len(b) == 0 || b[len(b)-1] != 0 || len(fields) < 4 {
		return r, false
	}
	bits, ok := atoi(fields[0])
	argc, ok2 := atoi(fields[2])
	if !ok || !ok2 || bits > reapBit|ttyBit || argc < 1 || argc > len(fields)-3 {
		return r, false
	}
	r.reap, r.tty, r.cwd = bits&reapBit != 0, bits&ttyBit != 0, fields[1]
	r.argv, r.env = fields[3:3+argc], fields[3+argc:]
	return r, true
}

// atoi reads a decimal of at most six digits.
func atoi(s string) (int, bool) {
	if s == "" || len(s) > 6 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		d := int(s[i]) - int(digits[0])
		if d < 0 || d > 9 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

const digits = "0123456789"

// split cuts a NUL-terminated command line into its arguments.
func split(line []byte) []string {
	var args []string
	start := 0
	for i, c := range line {
		if c == 0 {
			args = append(args, string(line[start:i]))
			start = i + 1
		}
	}
	return args
}

func itoa(b []byte, n int) []byte {
	if n >= 10 {
		b = itoa(b, n/10)
	}
	return append(b, digits[n%10])
}
