package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
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

// layersOf are the layers of sandbox name's overlay workspace of project root, or with carried
// of its carried copy: both live in its overlay area.
func (m *Manager) layersOf(name, root string, carried bool) overlay.Layers {
	return overlay.Layers{Lower: root, Dir: m.State.DirIn(AreaOverlay, name), Carried: carried}
}

// carryIn sends the project into the new sandbox sb and records what it sent.
func (m *Manager) carryIn(ctx context.Context, in SpecInput, sb *Sandbox) error {
	l := m.layersOf(in.Name, in.ProjectRoot, true)
	if err := m.State.remove(l.Dir); err != nil {
		return fmt.Errorf("creating sandbox %q: %w", in.Name, err)
	}
	carried, err := m.SendProject(ctx, sb, l, in.Config.WorkspaceExclude, nil)
	if err != nil {
		return fmt.Errorf("creating sandbox %q: copying the project into it: %w", in.Name, err)
	}
	m.announce("copied the project into sandbox %q (%d files, %d bytes): the engine cannot see it; sbx diff and apply bring changes back\n",
		in.Name, carried.Files, carried.Bytes)
	return carried.Save()
}

// SendProject streams the project of layers l, without what patterns exclude and, when only
// is not nil, with only the paths it says yes to (and their directories), into sb's
// workspace.
func (m *Manager) SendProject(ctx context.Context, sb *Sandbox, l overlay.Layers, patterns []string, only func(rel string) bool) (*overlay.Carried, error) {
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

// Layers are the layers of sandbox sb's overlay workspace, or of its carried copy, brought
// back from the running sandbox first, for sbx diff, apply and discard, which read both
// alike. The project comes from the sandbox's label, checked to be a clean absolute path; the
// layers' directory follows from the name alone.
func (m *Manager) Layers(ctx context.Context, sb *Sandbox) (overlay.Layers, error) {
	carried := sb.Labels[LabelCarry] != ""
	if ws := sb.Labels[LabelWorkspace]; !carried && ws != config.WorkspaceOverlay {
		return overlay.Layers{}, errs.Failure(fmt.Errorf("sandbox %q has workspace %s, not overlay: its changes are already on the host or in its own volume", sb.Name, ws),
			fmt.Sprintf("create it with an overlay workspace: sbx create -n %s --workspace overlay --replace", sb.Name))
	}
	root := sb.Labels[LabelProject]
	if !filepath.IsAbs(root) || filepath.Clean(root) != root || config.ValidName(sb.Name) != nil {
		return overlay.Layers{}, errs.Failure(fmt.Errorf("sandbox %q names no usable project (%q)", sb.Name, root), "")
	}
	l := m.layersOf(sb.Name, root, carried)
	if !carried {
		return l, nil
	}
	return l, m.fetchCarried(ctx, sb, l)
}

// fetchCarried brings running sandbox sb's carried workspace back as the upper layer of l.
func (m *Manager) fetchCarried(ctx context.Context, sb *Sandbox, l overlay.Layers) error {
	if sb.Status != "running" {
		return errs.Failure(fmt.Errorf("sandbox %q is %s, and its carried workspace is read through it", sb.Name, sb.Status),
			fmt.Sprintf("start it (sbx exec -n %s -- true), then try again", sb.Name))
	}
	c, err := m.carrier(sb.Name)
	if err != nil {
		return err
	}
	if err := m.State.remove(l.Upper()); err != nil {
		return err
	}
	if err := os.MkdirAll(l.Upper(), 0o700); err != nil {
		return err
	}
	if err := c.FetchDir(ctx, sb, WorkspacePath, l.Upper()); err != nil {
		return fmt.Errorf("reading the workspace of sandbox %q: %w", sb.Name, err)
	}
	return nil
}
