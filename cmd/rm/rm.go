// Package rm implements "sbx rm".
package rm

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
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
		RunE: cmdutil.NamesRunE(f, opts, &opts.Names, runF, rmRun),
	}
	cmd.Flags().BoolVarP(&opts.Force, "force", "f", false, "remove running sandboxes too")
	return cmd
}

func rmRun(ctx context.Context, opts *RmOptions) error {
	return cmdutil.EachSandbox(ctx, opts.Factory, opts.IO, opts.Names, func(m *sandbox.Manager, name string) error {
		return m.Remove(ctx, name, opts.Force)
	})
}
