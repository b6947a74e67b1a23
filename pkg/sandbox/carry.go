package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// A carried workspace: on a remote engine the project's path is not there to bind (or,
// worse, is some other directory of the same name), so a ro or rw workspace is a copy of the
// project in the sandbox's volume, sent through the sandbox at create (m.Carrier,
// pkg/transfer) without what workspaceExclude leaves out. Nothing the sandbox writes reaches the
// host but through sbx apply; sbx sync sends later host changes.

const (
	// LabelCarry says how the workspace got into the sandbox when it is not bound: CarryCopy.
	LabelCarry = "dev.sbx.carry"
	// CarryCopy is a copy of the project in the sandbox's volume.
	CarryCopy = "copy"
)

// Ways a workspace reaches a sandbox (Carriage).
const (
	CarriageBind    = "bind"    // the project itself, bound (ro, rw)
	CarriageOverlay = "overlay" // the project under an overlay whose changes stay on this machine
	CarriageVolume  = "volume"  // no project: a private volume (none)
)

// Carriage says how a workspace of mode reaches a sandbox: bound, as an overlay, a private
// volume, or CarryCopy, a copy carried to an engine that cannot see the project.
func Carriage(mode string, carried bool) string {
	switch {
	case carried:
		return CarryCopy
	case mode == config.WorkspaceOverlay:
		return CarriageOverlay
	case mode == config.WorkspaceNone:
		return CarriageVolume
	}
	return CarriageBind
}

// CarriageOf is how existing sandbox sb got its workspace, from its labels.
func CarriageOf(sb *Sandbox) string {
	return Carriage(sb.Labels[LabelWorkspace], sb.Labels[LabelCarry] != "")
}

// Carrier moves a carried workspace between the host and a running sandbox: pkg/transfer's
// Copier, which the core cannot import (it is built on the core's Exec).
type Carrier interface {
	// SendTar unpacks the tar stream r into the existing directory dir of sb.
	SendTar(ctx context.Context, sb *Sandbox, dir string, r io.Reader) error
	// FetchDir copies what sb's directory dir holds into the host directory dst.
	FetchDir(ctx context.Context, sb *Sandbox, dir, dst string) error
}

// carrier is m.Carrier; a Manager made without one cannot carry a workspace.
func (m *Manager) carrier(name string) (Carrier, error) {
	if m.Carrier == nil {
		return nil, errs.Failure(fmt.Errorf("sandbox %q has a carried workspace, and this sbx has no copier for it", name), "")
	}
	return m.Carrier, nil
}

// carries says whether a new sandbox with a workspace of mode gets a carried copy.
func (m *Manager) carries(mode string) bool {
	return m.Carry && (mode == config.WorkspaceRO || mode == config.WorkspaceRW)
}

// NewCarriage is how a sandbox made now with a workspace of mode would get it.
func (m *Manager) NewCarriage(mode string) string { return Carriage(mode, m.carries(mode)) }

// carriedLayers are the layers' directory of sandbox name's carried workspace of project root.
func (m *Manager) carriedLayers(name, root string) overlay.Layers {
	return overlay.Layers{Lower: root, Dir: m.State.DirIn(AreaOverlay, name), Carried: true}
}

// carryIn sends the project into the new sandbox sb and records what it sent.
func (m *Manager) carryIn(ctx context.Context, in SpecInput, sb *Sandbox) error {
	l := m.carriedLayers(in.Name, in.ProjectRoot)
	if err := m.State.remove(l.Dir); err != nil {
		return fmt.Errorf("creating sandbox %q: %w", in.Name, err)
	}
	carried, err := m.send(ctx, sb, l, in.Config.WorkspaceExclude, nil)
	if err != nil {
		return fmt.Errorf("creating sandbox %q: copying the project into it: %w", in.Name, err)
	}
	m.announce("copied the project into sandbox %q (%d files, %d bytes): the engine cannot see it; sbx diff and apply bring changes back\n",
		in.Name, carried.Files, carried.Bytes)
	return carried.Save()
}

// send streams the project, without what patterns exclude and, when only is not nil, with
// only the paths it says yes to (and their directories), into sb's workspace.
func (m *Manager) send(ctx context.Context, sb *Sandbox, l overlay.Layers, patterns []string, only func(rel string) bool) (*overlay.Carried, error) {
	exclude, err := overlay.NewExclude(patterns)
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("workspaceExclude: %w", err), "fix the pattern in your config")
	}
	exclude.Only = only
	c, err := m.carrier(sb.Name)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	sent := make(chan *overlay.Carried, 1)
	go func() {
		carried, err := overlay.Carry(l, exclude, pw)
		sent <- carried
		pw.CloseWithError(err)
	}()
	err = c.SendTar(ctx, sb, WorkspacePath, pr)
	// A copy that failed early leaves the walk blocked on the pipe: this ends it.
	_ = pr.CloseWithError(io.ErrClosedPipe)
	carried := <-sent
	if err != nil {
		return nil, err
	}
	if carried == nil {
		return nil, fmt.Errorf("the project could not be read")
	}
	return carried, nil
}

// fetchCarried brings running sandbox sb's workspace back as the upper layer of its carried
// layers, for sbx diff and apply, which read it as they read an overlay's.
func (m *Manager) fetchCarried(ctx context.Context, sb *Sandbox) (overlay.Layers, error) {
	root := sb.Labels[LabelProject]
	if !filepath.IsAbs(root) || filepath.Clean(root) != root || config.ValidName(sb.Name) != nil {
		return overlay.Layers{}, errs.Failure(fmt.Errorf("sandbox %q names no usable project (%q)", sb.Name, root), "")
	}
	if sb.Status != "running" {
		return overlay.Layers{}, errs.Failure(fmt.Errorf("sandbox %q is %s, and its carried workspace is read through it", sb.Name, sb.Status),
			fmt.Sprintf("start it (sbx exec -n %s -- true), then try again", sb.Name))
	}
	c, err := m.carrier(sb.Name)
	if err != nil {
		return overlay.Layers{}, err
	}
	l := m.carriedLayers(sb.Name, root)
	if err := m.State.remove(l.Upper()); err != nil {
		return overlay.Layers{}, err
	}
	if err := os.MkdirAll(l.Upper(), 0o700); err != nil {
		return overlay.Layers{}, err
	}
	if err := c.FetchDir(ctx, sb, WorkspacePath, l.Upper()); err != nil {
		return overlay.Layers{}, fmt.Errorf("reading the workspace of sandbox %q: %w", sb.Name, err)
	}
	return l, nil
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
func (m *Manager) Sync(ctx context.Context, name string, patterns []string) (*SyncResult, error) {
	sb, err := m.Inspect(ctx, name)
	if err != nil {
		return nil, err
	}
	if sb.Labels[LabelCarry] == "" {
		return nil, errs.Failure(fmt.Errorf("sandbox %q sees the project itself (workspace %s): there is nothing to sync", name, sb.Labels[LabelWorkspace]),
			"sbx sync is for a workspace carried to a remote engine")
	}
	lock, err := flock.Open(ctx, m.State.LockIn(AreaOverlay, name), true, true)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	l, err := m.fetchCarried(ctx, sb)
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
		if carried, err = m.send(ctx, sb, l, patterns, func(rel string) bool { return only[rel] }); err != nil {
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
		rm = append(rm, path.Join(WorkspacePath, p))
	}
	if len(rm) > 0 {
		stderr := &LimitedBuffer{What: "rm's errors", Limit: 64 << 10}
		r, err := m.Exec(ctx, sb, ExecOptions{Cmd: append([]string{"rm", "-rf", "--"}, rm...), Stdout: io.Discard, Stderr: stderr})
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
