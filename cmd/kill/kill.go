// Package kill implements "sbx kill".
package kill

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/proc"
)

// KillOptions are the inputs of "sbx kill".
type KillOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	ID      string
	Signal  string // as proc.ParseSignal returns it
}

// NewCmdKill builds "sbx kill".
func NewCmdKill(f *cmdutil.Factory, runF func(context.Context, *KillOptions) error) *cobra.Command {
	opts := &KillOptions{IO: f.IOStreams, Factory: f}
	var signal string
	cmd := &cobra.Command{
		Use:   "kill [-n NAME] ID",
		Short: "Signal a background process and its children",
		Long: `Send a signal (TERM unless --signal says otherwise) to the whole process group of a
background process started with "sbx exec -d", so its children get it too. After a signal
that ends processes by default, kill waits for the process to exit; when its main process
has exited, whatever is left of its group gets TERM, then KILL 5 s later.`,
		Example: `  sbx kill 3fa9c1
  sbx kill --signal KILL 3fa9c1
  sbx kill -n web --signal HUP 3fa9c1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if err := proc.ValidID(opts.ID); err != nil {
				return err
			}
			sig, err := proc.ParseSignal(signal)
			if err != nil {
				return err
			}
			opts.Signal = sig
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, killRun)
		},
	}
	fl := cmd.Flags()
	cmdutil.NameFlag(fl, &opts.Name)
	fl.StringVarP(&signal, "signal", "s", "TERM", "`signal` to send: a name such as TERM, KILL, INT, HUP, or a number")
	return cmd
}

func killRun(ctx context.Context, opts *KillOptions) error {
	m, sb, release, err := cmdutil.RunningSandbox(ctx, opts.Factory, opts.Name)
	if err != nil {
		return err
	}
	defer release()
	p, err := proc.Kill(ctx, m, sb, opts.ID, opts.Signal)
	if err != nil {
		return err
	}
	opts.IO.Progressf("sent %s to process %s: %s\n", opts.Signal, p.ID, p.Status())
	return nil
}
