package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// maxRunning is enforced with two kinds of flock in the state dir, both dropped by the kernel
// when their holder dies, so a SIGKILLed sbx never leaves one behind:
//
//	admission.lock  held exclusively around "count running -> evict -> start", so concurrent
//	                callers never both take the last free place, nor evict each other's
//	                sandboxes in a loop
//	leases/NAME     a reader-writer lock per sandbox: every command that runs something in
//	                the sandbox holds it shared from before it checks that the sandbox runs
//	                until it ends; eviction takes it exclusively without waiting, and skips
//	                the sandbox when it cannot. A command arriving during an eviction waits
//	                for the pause to take effect, then finds the sandbox paused and resumes it.
//
// The cap counts the running sandboxes on this engine that this user's sbx has used (those
// with a state file here): another user's sandboxes on a shared engine hold leases that
// cannot be seen from here, so they are neither counted nor evicted.
const (
	admissionLockFile = "admission.lock"
	leaseDir          = "leases"
)

// AdmissionWait bounds how long starting a sandbox waits for room when every running sandbox
// has a command in flight.
const AdmissionWait = 2 * time.Minute

// Lease marks a sandbox as in use by a command, so maxRunning does not evict it and its
// agent does not stop it for idleness (idle.go).
type Lease struct {
	f    *os.File
	idle *os.File
	// stopped says the sandbox's agent was stopping it for idleness when the lease was
	// taken: Ensure then waits for the stop to be over before it looks at the sandbox.
	stopped bool
}

// Release ends the lease. It is safe on a nil Lease and when called twice.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	for _, f := range []**os.File{&l.f, &l.idle} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

// Lease takes the lease on sandbox name, waiting while an eviction of it is under way. It is
// nil when the manager keeps no state, and also when the state dir cannot hold the lease
// (read-only, or a file system without flock): a command must not fail for want of it, and
// without the state dir maxRunning cannot evict anything either.
func (m *Manager) Lease(ctx context.Context, name string) (*Lease, error) {
	if m.State == nil {
		return nil, nil
	}
	path := m.State.leasePath(name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil
	}
	f, err := flock.Open(ctx, path, false, true)
	if err != nil {
		return nil, ctx.Err()
	}
	l := &Lease{f: f}
	m.holdIdleLock(ctx, l, name)
	return l, nil
}

// CapError says a sandbox could not start because maxRunning sandboxes run and every one of
// them had a command in flight for the whole wait.
type CapError struct {
	Name   string
	Max    int
	Busy   []string
	Waited time.Duration
}

func (e *CapError) Error() string {
	return fmt.Sprintf("sandbox %q cannot start: maxRunning is %d and every running sandbox (%s) kept a command in flight for %s",
		e.Name, e.Max, strings.Join(e.Busy, ", "), HumanDuration(e.Waited))
}

// ExitCode is 125: nothing ran.
func (e *CapError) ExitCode() int { return errs.CodeFailure }

// Hint says how to make room.
func (e *CapError) Hint() string {
	return "try again when a command has ended, stop a sandbox (sbx stop NAME), or raise maxRunning (sbx explain shows where it is set)"
}

// EvictionOrder returns the running sandboxes in the order maxRunning evicts them: least
// recently used first, by their last use, else their creation. It is pure.
func EvictionOrder(running []*Sandbox, lastUsed func(string) (time.Time, bool)) []*Sandbox {
	used := func(sb *Sandbox) time.Time {
		if t, ok := lastUsed(sb.Name); ok {
			return t
		}
		return sb.CreatedAt
	}
	out := slices.Clone(running)
	slices.SortStableFunc(out, func(a, b *Sandbox) int {
		if c := used(a).Compare(used(b)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// admit runs start, which makes sandbox name run, within cfg's maxRunning: under the
// admission lock it counts the other running sandboxes, evicts the least recently used ones
// that have no command in flight until there is room, and starts. When every running one is
// busy it waits, without the lock, up to AdmissionWait. The use is recorded before the lock
// is released, so the next caller counts this sandbox and sees it as the most recent.
func (m *Manager) admit(ctx context.Context, cfg config.Config, name string, start func(context.Context) error) error {
	if cfg.MaxRunning <= 0 || m.State == nil {
		return start(ctx)
	}
	if err := os.MkdirAll(m.State.Dir, 0o700); err != nil {
		return errs.Failure(fmt.Errorf("maxRunning: %w", err), "")
	}
	begin := m.Now()
	waiting := false
	for {
		lock, err := flock.Open(ctx, filepath.Join(m.State.Dir, admissionLockFile), true, true)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errs.Failure(fmt.Errorf("maxRunning: taking the admission lock: %w", err), "")
		}
		busy, err := m.makeRoom(ctx, cfg, name)
		if err == nil && busy == nil {
			err = start(ctx)
			if err == nil {
				_ = m.State.Touch(name)
			}
		}
		lock.Close()
		if err != nil || busy == nil {
			return err
		}
		if waited := m.Now().Sub(begin); waited >= AdmissionWait {
			return &CapError{Name: name, Max: cfg.MaxRunning, Busy: busy, Waited: waited}
		}
		if !waiting {
			m.announce("sandbox %q: waiting for room, maxRunning %d sandboxes run and each has a command in flight (%s)\n",
				name, cfg.MaxRunning, strings.Join(busy, ", "))
			waiting = true
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// makeRoom evicts sandboxes until one more may run beside the running ones. When it cannot,
// it returns the names of the running sandboxes that have a command in flight.
func (m *Manager) makeRoom(ctx context.Context, cfg config.Config, name string) ([]string, error) {
	running, pooled, err := m.runningOurs(ctx, name)
	if err != nil {
		return nil, err
	}
	need := len(running) + len(pooled) + 1 - cfg.MaxRunning
	// Pooled sandboxes go first, removed: nobody uses them, and a paused one is no use.
	for _, p := range pooled {
		if need <= 0 {
			return nil, nil
		}
		if err := m.removePooled(ctx, p.Name); err != nil {
			return nil, fmt.Errorf("maxRunning: %w", err)
		}
		m.announce("maxRunning %d: removed pooled sandbox %s to make room for %q\n", cfg.MaxRunning, p.Name, name)
		need--
	}
	var busy []string
	for _, sb := range EvictionOrder(running, m.State.LastUsed) {
		if need <= 0 {
			return nil, nil
		}
		lease, err := m.exclusiveLease(ctx, sb.Name)
		if errors.Is(err, flock.ErrLocked) {
			busy = append(busy, sb.Name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("maxRunning: %w", err)
		}
		err = m.evict(ctx, sb, cfg, name)
		lease.Release()
		if err != nil {
			return nil, err
		}
		need--
	}
	if need <= 0 {
		return nil, nil
	}
	return busy, nil
}

// evict pauses or stops sb, as cfg.Evict says, to make room for sandbox forName.
func (m *Manager) evict(ctx context.Context, sb *Sandbox, cfg config.Config, forName string) error {
	idle := m.idleFor(sb)
	verb := "paused"
	var err error
	if cfg.Evict == config.EvictStop {
		verb = "stopped"
		err = m.Engine.ContainerStop(ctx, sb.ID, container.StopOptions{})
	} else {
		err = m.Engine.ContainerPause(ctx, sb.ID)
	}
	if err != nil {
		// It may have stopped, paused or gone meanwhile, which makes room just as well.
		info, ierr := m.Engine.ContainerInspect(ctx, sb.ID)
		if cerrdefs.IsNotFound(ierr) || (ierr == nil && info.State != nil && info.State.Status != container.StateRunning) {
			return nil
		}
		return errs.Engine(fmt.Sprintf("maxRunning: evicting sandbox %q", sb.Name), err)
	}
	m.announce("maxRunning %d: %s sandbox %q (least recently used, idle %s) to make room for %q\n",
		cfg.MaxRunning, verb, sb.Name, HumanDuration(idle), forName)
	return nil
}

// wake makes sb run: it starts a stopped sandbox, unpauses a paused one, and leaves a running
// one be, as the engine reports it now (another sbx may have woken it meanwhile).
func (m *Manager) wake(ctx context.Context, sb *Sandbox) error {
	info, err := m.Engine.ContainerInspect(ctx, sb.ID)
	if err != nil {
		return errs.Engine(fmt.Sprintf("inspecting sandbox %q", sb.Name), err)
	}
	var status container.ContainerState
	if info.State != nil {
		status = info.State.Status
	}
	switch status {
	case container.StatePaused:
		if err := m.Engine.ContainerUnpause(ctx, sb.ID); err != nil {
			return errs.Engine(fmt.Sprintf("resuming sandbox %q", sb.Name), err)
		}
	case container.StateRunning:
	default:
		return m.start(ctx, sb)
	}
	return nil
}

// NotPausedError is a resume of a sandbox that is not paused and does not run.
type NotPausedError struct{ Name, Status string }

func (e *NotPausedError) Error() string {
	return fmt.Sprintf("sandbox %q is not paused (%s)", e.Name, e.Status)
}

// Hint says what starts it.
func (e *NotPausedError) Hint() string {
	return "sbx exec (or sbx create -n " + e.Name + ") starts a stopped sandbox"
}

// Pause freezes sandbox name: its processes keep their memory and state but get no CPU until
// it is resumed. It reports whether the sandbox was paused already.
func (m *Manager) Pause(ctx context.Context, name string) (bool, error) {
	sb, err := m.Inspect(ctx, name)
	if err != nil {
		return false, err
	}
	switch sb.Status {
	case "paused":
		return true, nil
	case "running":
	default:
		return false, errs.New(fmt.Errorf("sandbox %q is not running (%s); there is nothing to pause", name, sb.Status), errs.CodeError, "")
	}
	if err := m.Engine.ContainerPause(ctx, sb.ID); err != nil {
		return false, errs.Engine(fmt.Sprintf("pausing sandbox %q", name), err)
	}
	return false, nil
}

// Resume thaws the paused sandbox name within cfg's maxRunning (evicting another one when
// needed). It reports whether the sandbox was running already.
func (m *Manager) Resume(ctx context.Context, name string, cfg config.Config) (bool, error) {
	sb, err := m.Inspect(ctx, name)
	if err != nil {
		return false, err
	}
	switch sb.Status {
	case "running":
		return true, nil
	case "paused":
	default:
		return false, &NotPausedError{Name: name, Status: sb.Status}
	}
	return false, m.admit(ctx, cfg, name, func(ctx context.Context) error { return m.wake(ctx, sb) })
}
