// Package stop implements "sbx stop".
package stop

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

// StopOptions are the inputs of "sbx stop".
type StopOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Names   []string
}

// NewCmdStop builds "sbx stop".
func NewCmdStop(f *cmdutil.Factory, runF func(context.Context, *StopOptions) error) *cobra.Command {
	opts := &StopOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "stop [NAME...]",
		Short: "Stop sandboxes (their tmpfs contents are lost; the workspace is kept)",
		Long: `Stop sandboxes. Processes in them end and their tmpfs mounts (/tmp, /run, ...) are lost;
the workspace is kept, and the next exec starts the sandbox again. Without a name, the
project's default sandbox.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := cmdutil.SandboxNames(opts.Factory, args)
			if err != nil {
				return err
			}
			opts.Names = names
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return stopRun(cmd.Context(), opts)
		},
	}
	return cmd
}

func stopRun(ctx context.Context, opts *StopOptions) error {
	m, err := cmdutil.Manager(ctx, opts.Factory)
	if err != nil {
		return err
	}
	var failed []error
	for _, name := range opts.Names {
		if err := m.Stop(ctx, name); err != nil {
			failed = append(failed, err)
			continue
		}
		fmt.Fprintln(opts.IO.Out, name)
	}
	return cmdutil.ReportFailures(opts.IO, failed)
}
