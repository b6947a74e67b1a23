// Package sandbox creates, runs and removes sandboxes on a Docker engine (Docker or Podman,
// rootful or rootless, local or remote), through the narrow engine.Engine.
//
// Where each rule lives, by file. The lifecycle core:
//
//   - identity, spec and state: spec.go (BuildSpec, the one translation of a resolved config
//     into a container), state.go (sbx's state directory), drift.go (the one "is it current?"
//     rule), enginekind.go (what the engine is, and what it changes: Podman's seccomp file,
//     rootless users, limits verified at create and, through the agent, at every start);
//   - ensure, create, start, stop, remove, inspect, list: manager.go.
//
// The capabilities, on that core:
//
//   - exec and the agent path: exec.go (Manager.Exec, the engine's exec), agent.go (the
//     agent's directory, sockets and start), warm.go (the warm path), gvisor*.go;
//   - network and egress wiring: network.go, egress.go (the proxy container, its network or
//     socket: egressOverSocket), egressrules.go (sbx egress allow|deny); the rules, the
//     decision and the proxy itself are pkg/egress;
//   - the pool and throwaway sandboxes: pool.go, throwaway.go;
//   - workspace carriage at create, and the layers it leaves: overlay.go and carry.go, over
//     pkg/overlay (layers, diff, apply); the protected paths of a rw workspace are pkg/protect;
//   - a new sandbox that starts with a readiness wait, for pkg/browser: startnew.go;
//   - ports: ports.go (DialPort through the agent; the readiness waits are pkg/portforward's);
//   - prune and orphans: prune.go;
//   - admission (leases, maxRunning, eviction) and idle stop: admission.go, idle.go, with the
//     locks of internal/flock.
//
// Background processes and shell sessions (sbx exec -d, ps, logs, kill, sh), copies (sbx cp),
// snippets (sbx run) and resource use (sbx stats) have left for pkg/proc, pkg/transfer,
// pkg/snippet and pkg/stats, which need of this package only Manager.Exec (an Execer) and the
// engine; the browser has left for pkg/browser, which needs Manager.StartNew; the review of a
// workspace (sbx diff, apply, discard, rollback, sync) for pkg/workspace, which declares the
// Core it needs. Where the core needs a capability it declares the interface and is given the
// implementation: a carried workspace goes in and out through Manager.Carrier (carry.go),
// pkg/transfer's Copier. The integration tests of all of them make their sandboxes with
// pkg/sandbox/sandboxtest. The other capabilities still reach into the core's unexported
// methods, and the core into some of them (a start checks egress and the CA bundle); they
// move out one at a time, each behind the narrow interface it needs.
package sandbox
