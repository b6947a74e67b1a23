package cmdutil

import (
	"context"
	"fmt"

	"github.com/sbx-sandbox/sbx/pkg/workspace"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
)

// OverlaySandbox returns the overlay layers of sandbox name (the project's default when "")
// and its resolved config, whose protectedPaths sbx apply skips, for diff, apply and discard.
// Nothing is created or started: the layers are read on this machine.
func OverlaySandbox(ctx context.Context, f *Factory, name string) (overlay.Layers, *config.Resolved, error) {
	r, err := ResolveConfig(f, name)
	if r == nil {
		return overlay.Layers{}, nil, err
	}
	m, err := Manager(ctx, f)
	if err != nil {
		return overlay.Layers{}, nil, err
	}
	l, err := workspace.New(m).Layers(ctx, r.Name)
	return l, r, err
}

// StartAgain starts the sandbox of r again when a change of its overlay's layers stopped it
// (workspace.Workspaces.Change), saying so on stderr.
func StartAgain(ctx context.Context, f *Factory, r *config.Resolved, wasRunning bool, verb string) error {
	if !wasRunning {
		return nil
	}
	fmt.Fprintf(f.IOStreams.ErrOut, "stopped %s for the %s, so it sees its workspace as it now is; starting it again\n", r.Name, verb)
	_, _, release, err := EnsureSandbox(ctx, f, r)
	if err != nil {
		return err
	}
	release()
	return nil
}
