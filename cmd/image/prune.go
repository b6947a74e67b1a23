package image

import (
	"context"
	"fmt"

	"github.com/docker/go-units"
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// PruneOptions are the inputs of "sbx image prune".
type PruneOptions struct {
	IO     *iostreams.IOStreams
	Engine func(context.Context) (engine.Engine, error)
	JSON   bool
}

// NewCmdPrune builds "sbx image prune".
func NewCmdPrune(f *cmdutil.Factory, runF func(context.Context, *PruneOptions) error) *cobra.Command {
	opts := &PruneOptions{IO: f.IOStreams, Engine: f.Engine}
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove the images of setup that no sandbox uses",
		Long: `Remove the images sbx derived for setup that no container uses, running or stopped: those
of setups since changed, or of sandboxes since removed. The next sandbox with such a setup
builds its image again. Bundled images and images sbx did not make are left alone.

Prints one line an image removed, or kept with the engine's reason; --json prints an array
of objects with the fields tag, id, from, baseId, setup, size, created, removed and reason.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return pruneRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func pruneRun(ctx context.Context, opts *PruneOptions) error {
	eng, err := opts.Engine(ctx)
	if err != nil {
		return err
	}
	res, err := (&imagebuild.Images{Engine: eng}).PruneDerived(ctx)
	if opts.JSON {
		if res == nil {
			res = []imagebuild.PruneResult{}
		}
		if jerr := cmdutil.WriteJSON(opts.IO.Out, res); err == nil {
			err = jerr
		}
		return err
	}
	var freed int64
	for _, r := range res {
		name := r.Tag
		if r.Removed {
			freed += r.Size
			fmt.Fprintf(opts.IO.Out, "removed %s (setup of %s)\n", name, cmdutil.SafeText(r.From))
		} else if !opts.IO.Quiet() {
			fmt.Fprintf(opts.IO.ErrOut, "kept %s: %s\n", name, cmdutil.SafeText(r.Reason))
		}
	}
	if !opts.IO.Quiet() {
		fmt.Fprintf(opts.IO.ErrOut, "%d derived image(s) checked, %s freed\n", len(res), units.HumanSizeWithPrecision(float64(freed), 3))
	}
	return err
}
