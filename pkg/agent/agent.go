// Package agent holds the Go side of sbx's in-sandbox agent: the request, the frames, the
// client that speaks them over the agent's socket, and the hand-off of that socket when a
// sandbox starts. The agent itself (pkg/agent/agentd) is the sbx binary, mounted into the
// sandbox and run as its main process; it starts commands without the engine's exec path.
// PROTOCOL.md, beside this file, describes the protocol; both sides use the constants here.
//
// Where the agent's directory lives, when a sandbox gets an agent and whether a command goes
// to it or to the engine's exec is lifecycle, and stays in pkg/sandbox.
package agent

import (
	"strconv"
	"strings"
	"time"
)

// Version names the agent's code: a sandbox runs the agent its label names, and sbx talks
// only to the one it carries. A hash of the sources (the server, this file and the protocol)
// rather than sbx's version, so that a sandbox keeps its agent across releases that do not
// change it. The hash is a constant that TestVersionIsCurrent checks and rewrites, not
// computed at every start of sbx.
func Version() string { return version }

// Mode is the first argument that makes the sbx binary the agent (pkg/agent/agentd).
const Mode = "__agent"

// OwnSocket, right after Mode, makes the agent bind agent.sock in its directory itself
// instead of taking it over handoff.sock (PROTOCOL.md, "Sockets"): gVisor cannot accept on
// a listener made on the host.
const OwnSocket = "--own-socket"

// Forward, after Mode and OwnSocket, makes the agent listen on a TCP address of the
// sandbox's loopback and relay each connection to a Unix socket (PROTOCOL.md, "Forward"):
// "--forward=127.0.0.1:3128=/run/sbx-egress/proxy.sock". A sandbox with no network reaches
// its egress proxy so.
const Forward = "--forward="

// Cmd is the main process of a sandbox with an agent: the sbx binary mounted at exe, whose
// directory is mounted at dir, that stops the sandbox after idleStop without use (0:
// never; PROTOCOL.md, "Idle stop") and, with path, appends that directory to every
// command's PATH (sbx's toolbox, after the image's own programs). With ownSocket it binds
// its socket itself (OwnSocket); with forward ("ADDR:PORT=SOCKET") it relays that address
// to that socket (Forward).
func Cmd(exe, dir string, idleStop time.Duration, path string, ownSocket bool, forward string) []string {
	cmd := []string{exe, Mode}
	if ownSocket {
		cmd = append(cmd, OwnSocket)
	}
	if forward != "" {
		cmd = append(cmd, Forward+forward)
	}
	cmd = append(cmd, dir, strconv.FormatInt(idleStop.Milliseconds(), 10))
	if path != "" {
		cmd = append(cmd, path)
	}
	return cmd
}

// FrameType is a frame's first byte (PROTOCOL.md, "Frames").
type FrameType byte

const (
	FrameHello       FrameType = 'H'
	FrameRequest     FrameType = 'R'
	FrameProcess     FrameType = 'P'
	FrameSpawnFailed FrameType = 'F'
	FrameStdout      FrameType = '1'
	FrameStderr      FrameType = '2'
	FrameStdin       FrameType = 'I'
	FrameStdinEOF    FrameType = 'E'
	FrameResize      FrameType = 'W'
	FrameAbort       FrameType = 'K'
	FrameTimeout     FrameType = 'T'
	FrameOOM         FrameType = 'M'
	FrameExit        FrameType = 'Z'
	FrameRefused     FrameType = 'X'
	FrameListener    FrameType = 'L'
	FrameConnect     FrameType = 'C'
	FrameConnected   FrameType = 'O'
	FrameStatus      FrameType = 'S'
	FrameLimits      FrameType = 'G'
)

// Strict says what a client that goes away does to its command (PROTOCOL.md, "Strict modes").
type Strict int

const (
	StrictNone  Strict = 0
	StrictStdin Strict = 1
	StrictExit  Strict = 2
)

const (
	// MaxRequest bounds a frame to the agent, which a request, with the command's arguments
	// and variables, may fill: the kernel takes at most 6 MiB.
	MaxRequest = 8 << 20
	// Chunk is the most stdin one frame carries, and the most output the agent reads and
	// sends at once.
	Chunk = 256 << 10
	// High is how much input may wait for a command (or a relay's port) before the agent
	// stops reading its client, and how much output may wait for the client before the agent
	// stops reading the command.
	High = 4 << 20
	// maxFrame bounds a frame from the agent, which sends at most 256 KiB of output at once.
	maxFrame = 1 << 20
	// helloWait bounds the agent's greeting; a paused sandbox accepts but never greets.
	helloWait = 2 * time.Second
	// The sockets in an agent's directory (PROTOCOL.md, "Sockets").
	agentSocket   = "agent.sock"
	handoffSocket = "handoff.sock"
)

// Request is one command for the agent (PROTOCOL.md, "Request").
type Request struct {
	TTY        bool
	Rows, Cols uint // the terminal's size; 0 leaves it
	Strict     Strict
	Timeout    time.Duration // 0 means none
	Grace      time.Duration // between TERM and KILL
	// Reap makes the command a subreaper whose every process is ended with it; without,
	// the agent only sends TERM to its process group.
	Reap bool
	Dir  string // the working directory; "" is the agent's
	Argv []string
	Env  []string // K=V over the agent's environment
}

// Encode is the R frame's body. Arguments and variables cannot hold NUL (sbx refuses them
// before), so any other bytes pass unchanged.
func (r Request) Encode() []byte {
	fields := []string{bit(r.TTY), strconv.FormatUint(uint64(r.Rows), 10), strconv.FormatUint(uint64(r.Cols), 10),
		strconv.Itoa(int(r.Strict)), strconv.FormatInt(ceilMs(r.Timeout), 10), strconv.FormatInt(ceilMs(r.Grace), 10),
		bit(r.Reap), r.Dir, strconv.Itoa(len(r.Argv))}
	fields = append(append(fields, r.Argv...), r.Env...)
	return []byte(strings.Join(fields, "\x00") + "\x00")
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ceilMs is d in whole milliseconds, rounded up so that no timeout becomes none.
func ceilMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }
