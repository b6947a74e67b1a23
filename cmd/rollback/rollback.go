// Package rollback implements "sbx rollback".
package rollback

import (
	"context"
	"fmt"

	"github.com/sbx-sandbox/sbx/pkg/workspace"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

// RollbackOptions are the inputs of "sbx rollback".
type RollbackOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	Label   string
}

// NewCmdRollback builds "sbx rollback".
func NewCmdRollback(f *cmdutil.Factory, runF func(context.Context, *RollbackOptions) error) *cobra.Command {
	opts := &RollbackOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "rollback [-n NAME] LABEL",
		Short: "Return an overlay sandbox's workspace to a checkpoint",
		Long: `Return the workspace of a sandbox with workspace overlay to checkpoint LABEL (sbx
checkpoint): every change made since is dropped, every change recorded then is back. The
host project is not touched. Overlayfs must not see its layer change while mounted, so a
running sandbox is stopped first (its processes end, its /tmp is emptied) and started
again after.`,
		Example: `  sbx checkpoint before-refactor
  sbx rollback before-refactor`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Label = args[0]
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, rollbackRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	return cmd
}

func rollbackRun(ctx context.Context, opts *RollbackOptions) error {
	f := opts.Factory
	r, err := cmdutil.ResolveConfig(f, opts.Name)
	if r == nil {
		return err
	}
	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return err
	}
	wasRunning, err := workspace.New(m).Rollback(ctx, r.Name, opts.Label)
	if err != nil {
		return err
	}
	if err := cmdutil.StartAgain(ctx, f, r, wasRunning, "rollback"); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.Out, "rolled back %s to %s\n", r.Name, opts.Label)
	return nil
}
