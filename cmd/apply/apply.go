// Package apply implements "sbx apply".
package apply

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sbx-sandbox/sbx/pkg/workspace"

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
	// Expect is the digest sbx diff printed: any other change set is refused.
	Expect  string
	Yes     bool
	Restart bool
}

// NewCmdApply builds "sbx apply".
func NewCmdApply(f *cmdutil.Factory, runF func(context.Context, *ApplyOptions) error) *cobra.Command {
	opts := &ApplyOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "apply [-n NAME] [PATH...] [--expect DIGEST] [--dry-run] [--include-protected] [--restart] [--json]",
		Short: "Write an overlay sandbox's changes onto the project",
		Long: `Write what a sandbox with workspace overlay changed (sbx diff shows it) onto the project on
the host, all of it or the changes at or under each PATH. Each file is written to a
temporary file beside it and renamed over it, so it is old or new, never partial, and
nothing is written through a link. A path the host changed since the sandbox was created is
a conflict: listed and left alone (exit 1), the rest applied. Protected paths are skipped
and named unless --include-protected: what protectedPaths covers (.sbx.yaml, .vscode, ...),
anything git obeys (.git directories and files, .gitmodules, .gitattributes, in any
repository; hooks and includes the project's git configs name; a directory laid out as a
repository) and links that leave the project (sbx diff shows why for each). What was applied
leaves the sandbox's layer, so the next diff no longer shows it.

What is written is what was reviewed: sbx diff ends with the change set's digest, and
--expect DIGEST refuses (writing nothing) any other change set, as when the sandbox changed a
file after you looked; pass the same PATHs to both. On a terminal without --expect or --yes,
apply lists what it is about to write, with the digest, and asks. A running sandbox is
stopped while apply reads and writes its layers (so nothing changes under it, and it sees
the project as it then is) and started again; one in use (a command, a background process or
a session runs) is refused unless --restart.`,
		Example: `  sbx diff --stat && sbx apply
  sbx apply --expect sha256:3f1c... src/
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
	cmd.Flags().StringVar(&opts.Expect, "expect", "", "apply only the change set with this digest (sbx diff prints it)")
	cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "do not ask on a terminal")
	cmd.Flags().BoolVar(&opts.Restart, "restart", false, "stop a running sandbox for the apply even while it is in use, ending its processes")
	return cmd
}

func applyRun(ctx context.Context, opts *ApplyOptions) error {
	f := opts.Factory
	if opts.Expect != "" && !strings.HasPrefix(opts.Expect, overlay.DigestPrefix) {
		return errs.Usagef("--expect takes the digest sbx diff prints (%s...), not %q", overlay.DigestPrefix, opts.Expect)
	}
	l, r, err := cmdutil.OverlaySandbox(ctx, f, opts.Name)
	if err != nil {
		return err
	}
	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return err
	}
	o := overlay.ApplyOptions{Paths: opts.Paths, ProtectedPaths: r.Config.ProtectedPaths, IncludeProtected: opts.IncludeProtected,
		DryRun: opts.DryRun, Umask: uint32(f.Umask()), Review: func(changes []overlay.Change, digest string) error { return review(opts, changes, digest) }}
	if n, err := strconv.Atoi(f.Getenv(killAfterEnv)); err == nil && n > 0 {
		o.AfterEach = func(done int) {
			if done >= n {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
	var res *overlay.ApplyResult
	apply := func() (err error) {
		res, err = l.Apply(o)
		return err
	}
	wasRunning := false
	if opts.DryRun {
		var unfrozen string
		if unfrozen, err = workspace.New(m).Frozen(ctx, r.Name, apply); unfrozen != "" {
			fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", unfrozen)
		}
	} else {
		wasRunning, err = workspace.New(m).Change(ctx, r.Name, "apply", opts.Restart, apply)
	}
	if res != nil {
		report(opts, res)
	}
	// Started again however the apply ended: a refused change set leaves it as it was.
	if serr := cmdutil.StartAgain(ctx, f, r, wasRunning, "apply"); err == nil {
		err = serr
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

// review refuses a change set other than the one --expect names and, on a terminal without
// --expect or --yes, shows what is about to be written and asks.
func review(opts *ApplyOptions, changes []overlay.Change, digest string) error {
	if opts.Expect != "" {
		if digest != opts.Expect {
			return errs.New(fmt.Errorf("the sandbox's changes are %s, not the %s you expected: they are not what you reviewed, and nothing was written", digest, opts.Expect),
				errs.CodeError, "look at them again with sbx diff (with the same PATHs) and apply with its new digest")
		}
		return nil
	}
	if opts.Yes || opts.DryRun || opts.JSON || !opts.IO.IsStdinTTY() || !opts.IO.IsStderrTTY() {
		return nil
	}
	w := opts.IO.ErrOut
	for _, c := range changes {
		why := ""
		switch {
		case c.Conflict != "":
			why = " (conflict: left alone)"
		case c.Protected != "" && !opts.IncludeProtected:
			why = " (protected: skipped)"
		}
		fmt.Fprintf(w, "  %s %s %s%s\n", c.Status, c.Kind, overlay.Quote(c.Path), why)
	}
	fmt.Fprintf(w, "change set %s\n", digest)
	if !cmdutil.Confirm(opts.IO, fmt.Sprintf("Apply these %d changes to the project? [y/N] ", len(changes))) {
		return errs.New(fmt.Errorf("nothing was applied"), errs.CodeError, "")
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
