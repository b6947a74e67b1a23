// Package checkpoint implements "sbx checkpoint" and "sbx checkpoint ls".
package checkpoint

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
)

// CheckpointOptions are the inputs of "sbx checkpoint" and "sbx checkpoint ls".
type CheckpointOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	Label   string
	JSON    bool
}

// NewCmdCheckpoint builds "sbx checkpoint", with "ls" beneath it.
func NewCmdCheckpoint(f *cmdutil.Factory, runF func(context.Context, *CheckpointOptions) error) *cobra.Command {
	opts := &CheckpointOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "checkpoint [-n NAME] [LABEL]",
		Short: "Record an overlay sandbox's workspace, to roll back to",
		Long: `Record the state of a sandbox with workspace overlay: its changes (the upper layer), not
the project, as a tar in sbx's state directory. sbx rollback LABEL returns the workspace to
it. LABEL defaults to the time (cp-YYYYMMDD-HHMMSS); a checkpoint of the same label is
replaced. The layer is read as it is, so take checkpoints between commands.`,
		Example: `  sbx checkpoint before-refactor
  sbx checkpoint ls`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Label = args[0]
			}
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, checkpointRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.AddCommand(newCmdLs(f, runF))
	return cmd
}

func newCmdLs(f *cmdutil.Factory, runF func(context.Context, *CheckpointOptions) error) *cobra.Command {
	opts := &CheckpointOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "ls [-n NAME] [--json]",
		Short: "List an overlay sandbox's checkpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, lsRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the checkpoints as JSON (label, created, size)")
	return cmd
}

func checkpointRun(ctx context.Context, opts *CheckpointOptions) error {
	l, _, err := cmdutil.OverlaySandbox(ctx, opts.Factory, opts.Name)
	if err != nil {
		return err
	}
	label := opts.Label
	if label == "" {
		label = "cp-" + opts.Factory.Now().UTC().Format("20060102-150405")
	}
	cp, err := l.Checkpoint(label)
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.Out, "checkpoint %s (%s)\n", cp.Label, config.FormatSize(cp.Size))
	return nil
}

func lsRun(ctx context.Context, opts *CheckpointOptions) error {
	l, _, err := cmdutil.OverlaySandbox(ctx, opts.Factory, opts.Name)
	if err != nil {
		return err
	}
	list, err := l.Checkpoints()
	if err != nil {
		return err
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, list)
	}
	t := cmdutil.Table{Headers: []string{"LABEL", "CREATED", "SIZE"}}
	for _, c := range list {
		t.Rows = append(t.Rows, []string{c.Label, c.Created.Format("2006-01-02 15:04:05Z"), config.FormatSize(c.Size)})
	}
	t.Print(opts.IO)
	return nil
}
