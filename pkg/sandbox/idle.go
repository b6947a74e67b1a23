package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/agent"
)

// Idle stop (the idleStop key) is the agent's decision, made inside the sandbox with no
// daemon: it stops the sandbox (it exits, and it is the main process) once, for idleStop,
// no client was connected, no process but init and itself ran, and no sbx held the
// sandbox's idle lock. Every lease holds that lock shared (holdIdleLock), so a command, a
// copy or a port forward in progress on the host keeps the sandbox up even before it
// reaches the agent; the agent takes it exclusively to stop, and keeps it until it exits,
// so an sbx that comes meanwhile waits for the stop and then starts the sandbox again.

// idleLockName is the idle lock's name in the agent's directory.
const idleLockName = "idle.lock"

// idleLockWait bounds how long a lease waits for an agent that holds the idle lock: the
// agent holds it only while it exits (milliseconds); a sandbox whose processes hold it
// longer delay their own sandbox's commands by this much, and no other's.
const idleLockWait = 10 * time.Second

// holdIdleLock takes sandbox name's idle lock shared for l. When the agent holds it, it is
// stopping the sandbox: the lock is taken once it has exited, and l notes the stop. A lock
// that cannot be had leaves l without it: the command goes on, and the agent may stop an
// idle-looking sandbox under it only in the moments before the command reaches it.
func (m *Manager) holdIdleLock(ctx context.Context, l *Lease, name string) {
	path := m.State.IdleLockPath(name)
	f, err := flock.Open(ctx, path, false, false)
	if errors.Is(err, flock.ErrLocked) {
		l.stopped = true
		wctx, cancel := context.WithTimeout(ctx, idleLockWait)
		f, err = flock.Open(wctx, path, false, true)
		cancel()
	}
	if err != nil {
		m.debugf("sandbox %q: no idle lock (%v)", name, err)
		return
	}
	l.idle = f
}

// leaseForUse takes the lease on sandbox name for a command. When the sandbox's agent was
// stopping it for idleness, it then waits, for at most idleLockWait, until the engine no
// longer reports it as running (the agent's exit is over before the engine has noticed), so
// the caller finds the sandbox stopped, and starts it, rather than one about to stop.
func (m *Manager) leaseForUse(ctx context.Context, name string) (*Lease, error) {
	lease, err := m.Lease(ctx, name)
	if err != nil || lease == nil || !lease.stopped {
		return lease, err
	}
	if err := m.waitIdleStop(ctx, name); err != nil {
		lease.Release()
		return nil, err
	}
	return lease, nil
}

func (m *Manager) waitIdleStop(ctx context.Context, name string) error {
	deadline := m.Now().Add(idleLockWait)
	for {
		sb, err := m.Inspect(ctx, name)
		if err != nil || sb.Status != "running" || m.Now().After(deadline) {
			return nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// linkIdleLock puts sandbox name's idle lock into its agent directory dir, which the
// sandbox mounts read-only: the same file leases hold, so a lease taken before the start
// counts. The sandbox user must be able to open it (a flock needs no write access).
func (m *Manager) linkIdleLock(name, dir string) error {
	path := m.State.IdleLockPath(name)
	// A pooled sandbox starts before any lease was taken here (pool.go).
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	err = f.Chmod(0o644)
	f.Close()
	if err != nil {
		return err
	}
	return os.Link(path, filepath.Join(dir, idleLockName))
}

// IdleStatus is what a sandbox's agent says about its idle stop.
type IdleStatus struct {
	Off  bool          // idleStop is 0
	Busy bool          // something uses the sandbox
	Left time.Duration // else, how long until it stops
}

// IdleStatus asks the agent of running sandbox sb when it will stop for idleness; ok is false
// when there is no agent to ask (an image without it, a sandbox made by another sbx).
func (m *Manager) IdleStatus(ctx context.Context, sb *Sandbox) (st IdleStatus, ok bool, err error) {
	dir := m.agentDirOf(sb)
	if dir == "" || sb.Labels[LabelAgent] != agent.Version() {
		return IdleStatus{}, false, nil
	}
	answer, err := agent.Status(ctx, dir)
	if err != nil {
		return IdleStatus{}, false, fmt.Errorf("asking the agent of %q: %w", sb.Name, err)
	}
	switch answer {
	case "off":
		return IdleStatus{Off: true}, true, nil
	case "busy":
		return IdleStatus{Busy: true}, true, nil
	}
	ms, err := strconv.ParseUint(answer, 10, 31)
	if err != nil {
		return IdleStatus{}, false, fmt.Errorf("the agent of %q answered %q to a status query", sb.Name, answer)
	}
	return IdleStatus{Left: time.Duration(ms) * time.Millisecond}, true, nil
}
