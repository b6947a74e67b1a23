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

// Report is the descriptor the shim reports a failed exec on: errno\0text. The exec closes
// it, so the agent reads an end of file when the command started.
const Report = 3
