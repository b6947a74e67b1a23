// Package discard implements "sbx discard".
package discard

import (
	"context"
	"fmt"

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
with that directory.`,
		Example: `  sbx discard
  sbx discard build/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, discardRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	return cmd
}

func discardRun(ctx context.Context, opts *DiscardOptions) error {
	l, _, err := cmdutil.OverlaySandbox(ctx, opts.Factory, opts.Name)
	if err != nil {
		return err
	}
	dropped, err := l.Discard(opts.Paths)
	if err != nil {
		return err
	}
	for _, c := range dropped {
		fmt.Fprintf(opts.IO.Out, "discarded %s %s\n", c.Status, overlay.Quote(c.Path))
	}
	return nil
}
