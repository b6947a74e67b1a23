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
// project in the sandbox's volume, sent through the sandbox at create (the copy path of
// copy.go) without what workspaceExclude leaves out. Nothing the sandbox writes reaches the
// host but through sbx apply; sbx sync sends later host changes.

const (
	// LabelCarry says how the workspace got into the sandbox when it is not bound: CarryCopy.
	LabelCarry = "dev.sbx.carry"
	// CarryCopy is a copy of the project in the sandbox's volume.
	CarryCopy = "copy"
)

// carriedLayers are the layers' directory of sandbox name's carried workspace of project root.
func (m *Manager) carriedLayers(name, root string) overlay.Layers {
	return overlay.Layers{Lower: root, Dir: m.State.overlayDir(name), Carried: true}
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
	m.announce("copied the project into sandbox %q (%d files, %s): the engine cannot see it; sbx diff and apply bring changes back\n",
		in.Name, carried.Files, config.FormatSize(carried.Bytes))
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
	pr, pw := io.Pipe()
	sent := make(chan *overlay.Carried, 1)
	go func() {
		c, err := overlay.Carry(l, exclude, pw)
		sent <- c
		pw.CloseWithError(err)
	}()
	_, err = m.CopyIn(ctx, sb, CopyInOptions{Dst: WorkspacePath, DstIsDir: true, Stream: pr})
	// A copy that failed early leaves the walk blocked on the pipe: this ends it.
	_ = pr.CloseWithError(io.ErrClosedPipe)
	c := <-sent
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("the project could not be read")
	}
	return c, nil
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
	l := m.carriedLayers(sb.Name, root)
	if err := m.State.remove(l.Upper()); err != nil {
		return overlay.Layers{}, err
	}
	if err := os.MkdirAll(l.Upper(), 0o700); err != nil {
		return overlay.Layers{}, err
	}
	if _, err := m.CopyOut(ctx, sb, CopyOutOptions{Src: WorkspacePath, SrcIsDir: true, Contents: true, Dst: l.Upper()}); err != nil {
		return overlay.Layers{}, fmt.Errorf("reading the workspace of sandbox %q: %w", sb.Name, err)
	}
	return l, nil
}
