package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// Workspaces reviews the workspaces of sandboxes: it changes an overlay's layers (sbx apply,
// discard, rollback) with the sandbox stopped, reads them (sbx diff) with it paused, and
// syncs a carried copy.
type Workspaces struct {
	Core   Core
	Engine Pauser
	State  *sandbox.StateStore
}

// Core is what a workspace's review needs of the lifecycle core: sandbox.Manager.
type Core interface {
	Inspect(ctx context.Context, name string) (*sandbox.Sandbox, error)
	Layers(ctx context.Context, sb *sandbox.Sandbox) (overlay.Layers, error)
	IdleStatus(ctx context.Context, sb *sandbox.Sandbox) (sandbox.IdleStatus, bool, error)
	Stop(ctx context.Context, name string) error
	Exec(ctx context.Context, sb *sandbox.Sandbox, opts sandbox.ExecOptions) (*sandbox.ExecResult, error)
	SendProject(ctx context.Context, sb *sandbox.Sandbox, l overlay.Layers, patterns []string, only func(rel string) bool) (*overlay.Carried, error)
}

// Pauser pauses and resumes a container: engine.Engine.
type Pauser interface {
	ContainerPause(ctx context.Context, id string) error
	ContainerUnpause(ctx context.Context, id string) error
}

// New is the review of m's sandboxes' workspaces.
func New(m *sandbox.Manager) *Workspaces {
	return &Workspaces{Core: m, Engine: m.Engine, State: m.State}
}

// Layers returns the layers of sandbox name's overlay workspace, or of its carried copy
// (brought back from the running sandbox), for sbx diff, apply and discard.
func (w *Workspaces) Layers(ctx context.Context, name string) (overlay.Layers, error) {
	sb, err := w.Core.Inspect(ctx, name)
	if err != nil {
		return overlay.Layers{}, err
	}
	return w.Core.Layers(ctx, sb)
}

// Change runs change, which alters the upper layer of sandbox name's overlay from the
// host (sbx apply, discard, rollback), with the sandbox stopped: overlayfs must not see its
// layers change while mounted (a running sandbox keeps seeing what was discarded, and what it
// writes to a file applied under it goes to a file no longer in the layer). A running sandbox
// is stopped only when nothing uses it (no process but its agent, no sbx command in
// progress), or with restart, which ends its processes; it reports whether the sandbox was
// running, so the caller can start it again. A carried copy's layers are sbx's own copy, not
// mounted, so they change without a stop.
func (w *Workspaces) Change(ctx context.Context, name, verb string, restart bool, change func() error) (wasRunning bool, err error) {
	sb, err := w.Core.Inspect(ctx, name)
	if err != nil {
		return false, err
	}
	if sb.Labels[sandbox.LabelCarry] != "" || (sb.Status != "running" && sb.Status != "paused") {
		return false, w.withLock(ctx, name, change)
	}
	inUse := func(why string) error {
		return errs.Failure(fmt.Errorf("sandbox %q %s: a running overlay keeps seeing its layers as they were, so sbx %s changes them only with the sandbox stopped", name, why, verb),
			fmt.Sprintf("wait for it to finish, stop it (sbx stop %s), or pass --restart to stop it now, ending its processes, and start it again", name))
	}
	if !restart {
		st, ok, err := w.Core.IdleStatus(ctx, sb)
		switch {
		case err != nil || !ok:
			return false, inUse("is running and sbx cannot ask its agent whether it is in use")
		case st.Busy:
			return false, inUse("is in use (a command, a background process or a session runs)")
		}
	}
	// Held exclusively, the idle lock keeps sbx commands from starting meanwhile; one that
	// holds it now is a command in progress.
	idle, err := flock.Open(ctx, w.State.IdleLockPath(name), true, restart)
	if errors.Is(err, flock.ErrLocked) {
		return false, inUse("is in use (an sbx command is in progress)")
	}
	if err != nil {
		return false, fmt.Errorf("sandbox %q: taking its idle lock: %w", name, err)
	}
	defer idle.Close()
	if err := w.Core.Stop(ctx, name); err != nil {
		return false, err
	}
	return true, w.withLock(ctx, name, change)
}

// Frozen runs read with sandbox name paused when it runs on an overlay of this machine, so
// the upper layer read (sbx diff) does not change under it. A sandbox already paused stays
// so; a carried copy's layers are sbx's own copy. When the engine cannot pause it, read still
// runs, and unfrozen says why, for a warning: apply's digest check still holds.
func (w *Workspaces) Frozen(ctx context.Context, name string, read func() error) (unfrozen string, err error) {
	sb, err := w.Core.Inspect(ctx, name)
	if err != nil {
		return "", err
	}
	if sb.Labels[sandbox.LabelCarry] != "" || sb.Status != "running" {
		return "", read()
	}
	if err := w.Engine.ContainerPause(ctx, sb.ID); err != nil {
		return fmt.Sprintf("the engine could not pause sandbox %q while its changes were read (%v), so they may have changed meanwhile", name, err), read()
	}
	defer func() {
		if uerr := w.Engine.ContainerUnpause(context.WithoutCancel(ctx), sb.ID); uerr != nil && err == nil {
			err = errs.Engine(fmt.Sprintf("unpausing sandbox %q after reading its changes", name), uerr)
		}
	}()
	return "", read()
}

func (w *Workspaces) withLock(ctx context.Context, name string, change func() error) error {
	lock, err := flock.Open(ctx, w.State.LockIn(sandbox.AreaOverlay, name), true, true)
	if err != nil {
		return err
	}
	defer lock.Close()
	return change()
}

// Rollback returns sandbox name's overlay workspace to its checkpoint label, stopping a
// running sandbox first (Change); it reports whether it was running, so the caller can
// start it again.
func (w *Workspaces) Rollback(ctx context.Context, name, label string) (wasRunning bool, err error) {
	l, err := w.Layers(ctx, name)
	if err != nil {
		return false, err
	}
	return w.Change(ctx, name, "rollback", true, func() error {
		if err := l.Rollback(label); err != nil {
			return errs.Failure(fmt.Errorf("sandbox %q: %w", name, err), fmt.Sprintf("list the checkpoints with sbx checkpoint ls -n %s", name))
		}
		return nil
	})
}

// SyncResult is what sbx sync did. Its JSON names are stable.
type SyncResult struct {
	Sent    []string `json:"sent"`
	Removed []string `json:"removed"`
	// Kept are host changes not sent because the sandbox changed the same path: its version
	// stays, to come back with sbx apply or to be dropped there.
	Kept []string `json:"kept"`
}

// Sync sends what the host changed in the project since sandbox name's carried workspace was
// made or last synced, but for paths the sandbox changed too, and removes there what the host
// removed. patterns are the workspaceExclude in force.
func (w *Workspaces) Sync(ctx context.Context, name string, patterns []string) (*SyncResult, error) {
	sb, err := w.Core.Inspect(ctx, name)
	if err != nil {
		return nil, err
	}
	if sb.Labels[sandbox.LabelCarry] == "" {
		return nil, errs.Failure(fmt.Errorf("sandbox %q sees the project itself (workspace %s): there is nothing to sync", name, sb.Labels[sandbox.LabelWorkspace]),
			"sbx sync is for a workspace carried to a remote engine")
	}
	lock, err := flock.Open(ctx, w.State.LockIn(sandbox.AreaOverlay, name), true, true)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	l, err := w.Core.Layers(ctx, sb)
	if err != nil {
		return nil, err
	}
	theirs, err := l.Changes(nil, nil)
	if err != nil {
		return nil, err
	}
	changed := map[string]bool{}
	for _, c := range theirs {
		changed[c.Path], changed[c.OldPath] = true, c.OldPath != ""
	}
	exclude, err := overlay.NewExclude(patterns)
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("workspaceExclude: %w", err), "fix the pattern in your config")
	}
	send, gone, err := l.HostChanges(exclude)
	if err != nil {
		return nil, err
	}
	res := &SyncResult{Sent: []string{}, Removed: []string{}, Kept: []string{}}
	only := map[string]bool{}
	for _, p := range send {
		if changed[p] {
			res.Kept = append(res.Kept, p)
			continue
		}
		res.Sent = append(res.Sent, p)
		for q := p; q != "."; q = path.Dir(q) {
			only[q] = true
		}
	}
	var carried *overlay.Carried
	if len(res.Sent) > 0 {
		if carried, err = w.Core.SendProject(ctx, sb, l, patterns, func(rel string) bool { return only[rel] }); err != nil {
			return nil, fmt.Errorf("syncing sandbox %q: %w", name, err)
		}
	}
	var rm []string
	for _, p := range gone {
		if changed[p] {
			res.Kept = append(res.Kept, p)
			continue
		}
		res.Removed = append(res.Removed, p)
		rm = append(rm, path.Join(sandbox.WorkspacePath, p))
	}
	if len(rm) > 0 {
		stderr := &sandbox.LimitedBuffer{What: "rm's errors", Limit: 64 << 10}
		r, err := w.Core.Exec(ctx, sb, sandbox.ExecOptions{Cmd: append([]string{"rm", "-rf", "--"}, rm...), Stdout: io.Discard, Stderr: stderr})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("rm exited %d: %s", r.ExitCode, termtext.Clean(stderr.String()))
		}
		if err != nil {
			return nil, fmt.Errorf("syncing sandbox %q: removing what the host removed: %w", name, err)
		}
	}
	if err := l.Synced(carried, res.Removed); err != nil {
		return nil, fmt.Errorf("syncing sandbox %q: %w", name, err)
	}
	slices.Sort(res.Kept)
	return res, nil
}
