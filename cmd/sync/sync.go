// Package sync implements "sbx sync".
package sync

import (
	"context"
	"fmt"

	"github.com/sbx-sandbox/sbx/pkg/workspace"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
)

// SyncOptions are the inputs of "sbx sync".
type SyncOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	JSON    bool
}

// NewCmdSync builds "sbx sync".
func NewCmdSync(f *cmdutil.Factory, runF func(context.Context, *SyncOptions) error) *cobra.Command {
	opts := &SyncOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "sync [-n NAME]",
		Short: "Send the project's later changes to a sandbox on a remote engine",
		Long: `On an engine that cannot see the project (a remote one), a sandbox works on a copy of
the project made when it was created. sbx sync sends what changed on the host since then (or
since the last sync) and removes there what the host removed, without what workspaceExclude
leaves out. A path the sandbox changed too keeps the sandbox's version (listed as kept, exit
1): bring it back with sbx apply, or change it in the sandbox. The sandbox must be running.`,
		Example: `  sbx sync
  sbx sync -n web --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, syncRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what was sent, removed and kept as a JSON object")
	return cmd
}

func syncRun(ctx context.Context, opts *SyncOptions) error {
	f := opts.Factory
	r, err := cmdutil.ResolveConfig(f, opts.Name)
	if r == nil {
		return err
	}
	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return err
	}
	res, err := workspace.New(m).Sync(ctx, r.Name, r.Config.WorkspaceExclude)
	if err != nil {
		return err
	}
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, res); err != nil {
			return err
		}
	} else {
		for _, p := range res.Sent {
			fmt.Fprintf(opts.IO.Out, "sent %s\n", overlay.Quote(p))
		}
		for _, p := range res.Removed {
			fmt.Fprintf(opts.IO.Out, "removed %s\n", overlay.Quote(p))
		}
		for _, p := range res.Kept {
			fmt.Fprintf(opts.IO.ErrOut, "kept: %s: changed in the sandbox too\n", overlay.Quote(p))
		}
	}
	if len(res.Kept) > 0 {
		return errs.New(fmt.Errorf("%d host changes were not sent: the sandbox changed the same paths", len(res.Kept)), errs.CodeError,
			"look at the sandbox's side with sbx diff PATH; sbx apply brings it to the host")
	}
	return nil
}
