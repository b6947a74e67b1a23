// Package logs implements "sbx logs".
package logs

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
)

// LogsOptions are the inputs of "sbx logs".
type LogsOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	ID      string
	Follow  bool
	Tail    int
}

// NewCmdLogs builds "sbx logs".
func NewCmdLogs(f *cmdutil.Factory, runF func(context.Context, *LogsOptions) error) *cobra.Command {
	opts := &LogsOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "logs [-n NAME] ID",
		Short: "Show the output of a background process",
		Long: `Show what a background process (sbx exec -d) has written so far: its stdout on stdout,
its stderr on stderr. -f keeps following until the process exits. A process keeps the
newest 768 KiB to 1 MiB of each stream; older output is dropped, and logs says so.`,
		Example: `  sbx logs 3fa9c1
  sbx logs -f --tail 20 3fa9c1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if err := proc.ValidID(opts.ID); err != nil {
				return err
			}
			if err := cmdutil.CheckName(opts.Name); err != nil {
				return err
			}
			if opts.Tail < -1 {
				return errs.Usagef("--tail must be a number of lines, or -1 for all")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return logsRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	cmdutil.NameFlag(fl, &opts.Name)
	fl.BoolVarP(&opts.Follow, "follow", "f", false, "keep showing output until the process exits")
	fl.IntVar(&opts.Tail, "tail", -1, "show only the last `N` lines of each stream (-1: all)")
	return cmd
}

func logsRun(ctx context.Context, opts *LogsOptions) error {
	m, sb, release, err := cmdutil.RunningSandbox(ctx, opts.Factory, opts.Name)
	if err != nil {
		return err
	}
	defer release()
	p, err := proc.Get(ctx, m, sb, opts.ID)
	if err != nil {
		return err
	}
	if opts.Tail < 0 {
		for _, d := range []struct {
			stream string
			n      int64
		}{{"stdout", p.DroppedStdout}, {"stderr", p.DroppedStderr}} {
			if d.n > 0 {
				opts.IO.Progressf("note: the oldest %d bytes of its %s were dropped (a process keeps at most %d bytes of each stream)\n", d.n, d.stream, proc.OutputCap)
			}
		}
	}
	err = proc.Logs(ctx, m, sb, opts.ID, proc.LogsOptions{Follow: opts.Follow, Tail: opts.Tail, Stdout: opts.IO.Out, Stderr: opts.IO.ErrOut})
	if err != nil || !opts.Follow {
		return err
	}
	if p, err = proc.Get(ctx, m, sb, opts.ID); err == nil {
		opts.IO.Progressf("process %s %s\n", p.ID, p.Status())
	}
	return nil
}
