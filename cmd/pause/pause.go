// Package pause implements "sbx pause" and "sbx resume".
package pause

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// PauseOptions are the inputs of "sbx pause" and "sbx resume".
type PauseOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Names   []string
}

// NewCmdPause builds "sbx pause".
func NewCmdPause(f *cmdutil.Factory, runF func(context.Context, *PauseOptions) error) *cobra.Command {
	return newCmd(f, runF, pauseRun, &cobra.Command{
		Use:   "pause [NAME...]",
		Short: "Freeze sandboxes: their processes stay in memory but get no CPU",
		Long: `Freeze sandboxes. Every process in them stops where it is and keeps its memory, files
and state (background processes and shell sessions included) until the sandbox is resumed:
by "sbx resume", or by the next exec, cp, run or sh, which resumes it first and says so.
A paused sandbox counts as not running for maxRunning. Without a name, the project's
default sandbox.`,
		Example: `  sbx pause
  sbx pause web scratch`,
	})
}

// NewCmdResume builds "sbx resume".
func NewCmdResume(f *cmdutil.Factory, runF func(context.Context, *PauseOptions) error) *cobra.Command {
	return newCmd(f, runF, resumeRun, &cobra.Command{
		Use:   "resume [NAME...]",
		Short: "Thaw paused sandboxes",
		Long: `Thaw paused sandboxes: their processes carry on where they stopped. Under maxRunning the
least recently used running sandbox without a command in flight is evicted first when there
is no room. A sandbox that is stopped is not resumed (sbx exec starts it). Without a name,
the project's default sandbox.`,
		Example: `  sbx resume
  sbx resume web scratch`,
	})
}

// newCmd gives cmd the RunE both commands share: the names, or the project's default
// sandbox, then runF (tests) or run.
func newCmd(f *cmdutil.Factory, runF, run func(context.Context, *PauseOptions) error, cmd *cobra.Command) *cobra.Command {
	opts := &PauseOptions{IO: f.IOStreams, Factory: f}
	cmd.RunE = cmdutil.NamesRunE(f, opts, &opts.Names, runF, run)
	return cmd
}

func pauseRun(ctx context.Context, opts *PauseOptions) error {
	return cmdutil.EachSandbox(ctx, opts.Factory, opts.IO, opts.Names, func(m *sandbox.Manager, name string) error {
		already, err := m.Pause(ctx, name)
		if err == nil && already {
			opts.IO.Progressf("sandbox %q was already paused\n", name)
		}
		return err
	})
}

func resumeRun(ctx context.Context, opts *PauseOptions) error {
	return cmdutil.EachSandbox(ctx, opts.Factory, opts.IO, opts.Names, func(m *sandbox.Manager, name string) error {
		// The cap and how to evict come from the sandbox's own configuration.
		r, err := cmdutil.ResolveConfig(opts.Factory, name)
		if r == nil {
			return err
		}
		already, err := m.Resume(ctx, name, r.Config)
		if err == nil && already {
			opts.IO.Progressf("sandbox %q was not paused\n", name)
		}
		return err
	})
}
