// Package discard implements "sbx discard".
package discard

import (
	"context"
	"fmt"

	"github.com/sbx-sandbox/sbx/pkg/workspace"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
)

// DiscardOptions are the inputs of "sbx discard".
type DiscardOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	Paths   []string
	Restart bool
}

// NewCmdDiscard builds "sbx discard".
func NewCmdDiscard(f *cmdutil.Factory, runF func(context.Context, *DiscardOptions) error) *cobra.Command {
	opts := &DiscardOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "discard [-n NAME] [PATH...]",
		Short: "Drop an overlay sandbox's changes",
		Long: `Drop what a sandbox with workspace overlay changed, all of it or the changes at or under
each PATH, so /workspace shows the project as it is on the host there again. The host is
not touched. A change inside a directory the sandbox deleted or replaced whole goes only
with that directory. A running sandbox would keep seeing what was dropped (overlayfs must not
see its layers change while mounted), so it is stopped for the discard and started again;
one in use (a command, a background process or a session runs) is refused unless --restart.`,
		Example: `  sbx discard
  sbx discard build/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, discardRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.Restart, "restart", false, "stop a running sandbox for the discard even while it is in use, ending its processes")
	return cmd
}

func discardRun(ctx context.Context, opts *DiscardOptions) error {
	f := opts.Factory
	l, r, err := cmdutil.OverlaySandbox(ctx, f, opts.Name)
	if err != nil {
		return err
	}
	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return err
	}
	var dropped []overlay.Change
	wasRunning, err := workspace.New(m).Change(ctx, r.Name, "discard", opts.Restart, func() error {
		dropped, err = l.Discard(opts.Paths)
		return err
	})
	if err != nil {
		return err
	}
	for _, c := range dropped {
		fmt.Fprintf(opts.IO.Out, "discarded %s %s\n", c.Status, overlay.Quote(c.Path))
	}
	return cmdutil.StartAgain(ctx, f, r, wasRunning, "discard")
}
