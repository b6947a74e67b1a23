// Package rm implements "sbx rm".
package rm

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

// RmOptions are the inputs of "sbx rm".
type RmOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Names   []string
	Force   bool
}

// NewCmdRm builds "sbx rm".
func NewCmdRm(f *cmdutil.Factory, runF func(context.Context, *RmOptions) error) *cobra.Command {
	opts := &RmOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "rm [-f] [NAME...]",
		Short: "Remove sandboxes with their private workspace and state",
		Long: `Remove sandboxes: the container, its private workspace volume (workspace mode none) and
its last-use record. A running sandbox needs -f. Without a name, the project's default
sandbox. A name that does not exist is an error (exit 1), but the others are still removed.`,
		Example: `  sbx rm -f
  sbx rm -f web scratch`,
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := cmdutil.SandboxNames(opts.Factory, args)
			if err != nil {
				return err
			}
			opts.Names = names
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return rmRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.Force, "force", "f", false, "remove running sandboxes too")
	return cmd
}

func rmRun(ctx context.Context, opts *RmOptions) error {
	m, err := cmdutil.Manager(ctx, opts.Factory)
	if err != nil {
		return err
	}
	var failed []error
	for _, name := range opts.Names {
		if err := m.Remove(ctx, name, opts.Force); err != nil {
			failed = append(failed, err)
			continue
		}
		fmt.Fprintln(opts.IO.Out, name)
	}
	return cmdutil.ReportFailures(opts.IO, failed)
}
