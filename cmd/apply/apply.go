// Package apply implements "sbx apply".
package apply

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
)

// killAfterEnv names a test-only variable: sbx apply kills itself with SIGKILL once that many
// changes have reached the project, so a test can check that no file is left half-written.
const killAfterEnv = "SBX_TEST_APPLY_KILL_AFTER"

// ApplyOptions are the inputs of "sbx apply".
type ApplyOptions struct {
	IO               *iostreams.IOStreams
	Factory          *cmdutil.Factory
	Name             string
	Paths            []string
	DryRun           bool
	IncludeProtected bool
	JSON             bool
}

// NewCmdApply builds "sbx apply".
func NewCmdApply(f *cmdutil.Factory, runF func(context.Context, *ApplyOptions) error) *cobra.Command {
	opts := &ApplyOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "apply [-n NAME] [PATH...] [--dry-run] [--include-protected] [--json]",
		Short: "Write an overlay sandbox's changes onto the project",
		Long: `Write what a sandbox with workspace overlay changed (sbx diff shows it) onto the project on
the host, all of it or the changes at or under each PATH. Each file is written to a
temporary file beside it and renamed over it, so it is old or new, never partial, and
nothing is written through a link. A path the host changed since the sandbox was created is
a conflict: listed and left alone (exit 1), the rest applied. Protected paths are skipped
and named unless --include-protected: what protectedPaths covers (.sbx.yaml, .vscode, ...),
anything git obeys (.git directories and files, .gitmodules, .gitattributes, in any
repository; hooks and includes the project's git configs name; a directory laid out as a
repository) and links that leave the project (sbx diff shows why for each). What was applied leaves the sandbox's layer, so the next diff no
longer shows it.`,
		Example: `  sbx diff --stat && sbx apply
  sbx apply src/ --dry-run`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, applyRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "list what would be applied, change nothing")
	cmd.Flags().BoolVar(&opts.IncludeProtected, "include-protected", false, "apply protected paths too (look at them in sbx diff first)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what was applied, skipped and in conflict as JSON")
	return cmd
}

func applyRun(ctx context.Context, opts *ApplyOptions) error {
	f := opts.Factory
	l, r, err := cmdutil.OverlaySandbox(ctx, f, opts.Name)
	if err != nil {
		return err
	}
	o := overlay.ApplyOptions{Paths: opts.Paths, ProtectedPaths: r.Config.ProtectedPaths, IncludeProtected: opts.IncludeProtected,
		DryRun: opts.DryRun, Umask: uint32(f.Umask())}
	if n, err := strconv.Atoi(f.Getenv(killAfterEnv)); err == nil && n > 0 {
		o.AfterEach = func(done int) {
			if done >= n {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
	res, err := l.Apply(o)
	if res != nil {
		report(opts, res)
	}
	if err != nil {
		return err
	}
	if len(res.Conflicts) > 0 {
		return errs.New(fmt.Errorf("%d changes conflict with the host and were left alone", len(res.Conflicts)), errs.CodeError,
			"look at them with sbx diff PATH; apply them after putting the host's files back, or drop them with sbx discard PATH")
	}
	return nil
}

func report(opts *ApplyOptions, res *overlay.ApplyResult) {
	if opts.JSON {
		_ = cmdutil.WriteJSON(opts.IO.Out, res)
		return
	}
	verb := "applied"
	if opts.DryRun {
		verb = "would apply"
	}
	for _, c := range res.Applied {
		fmt.Fprintf(opts.IO.Out, "%s %s %s\n", verb, c.Status, overlay.Quote(c.Path))
	}
	for _, c := range res.Skipped {
		fmt.Fprintf(opts.IO.ErrOut, "skipped %s: protected (%s); --include-protected applies it\n", overlay.Quote(c.Path), c.Protected)
	}
	for _, c := range res.Conflicts {
		fmt.Fprintf(opts.IO.ErrOut, "conflict %s: %s\n", overlay.Quote(c.Path), c.Conflict)
	}
}
