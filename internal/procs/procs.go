// Package procs runs sbx on one P (GOMAXPROCS 1) from its start, unless GOMAXPROCS says
// otherwise, and gives the work that can use them every P back.
//
// Most of what sbx does is wait: on files, the engine, a sandbox's agent. With a second P the
// runtime starts threads to look for work whenever a goroutine wakes, and each thread costs
// a clone at start and a teardown at exit; a warm exec made two or three more and took about
// 2 ms longer in make bench. The agent and its shim run on one P too.
package procs

import (
	"runtime"
	"syscall"
)

// all is how many Ps the runtime gave sbx, when One took them away.
var all int

// One leaves sbx one P, unless the user set GOMAXPROCS. Package onestart calls it at the
// start of the sbx binary.
func One() {
	if _, set := syscall.Getenv("GOMAXPROCS"); !set && all == 0 {
		all = runtime.GOMAXPROCS(1)
	}
}

// All gives back the Ps One took: for work done in parallel on the CPU (sbx ls resolving
// many configs), and for servers that relay for a while (the egress proxy, port forwarding,
// the MCP server).
func All() {
	if all > 1 {
		runtime.GOMAXPROCS(all)
	}
}
