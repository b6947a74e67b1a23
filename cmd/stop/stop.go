// Package stop implements "sbx stop".
package stop

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
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
		RunE: cmdutil.NamesRunE(f, opts, &opts.Names, runF, stopRun),
	}
	return cmd
}

func stopRun(ctx context.Context, opts *StopOptions) error {
	return cmdutil.EachSandbox(ctx, opts.Factory, opts.IO, opts.Names, func(m *sandbox.Manager, name string) error {
		return m.Stop(ctx, name)
	})
}
