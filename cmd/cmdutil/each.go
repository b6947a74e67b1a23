package cmdutil

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// NamesRunE is the RunE of a command on the sandboxes its arguments name, or on the project's
// default sandbox without any: it stores the names in *names, then calls runF (tests) or run.
func NamesRunE[O any](f *Factory, opts O, names *[]string, runF, run func(context.Context, O) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		checked, err := SandboxNames(f, args)
		if err != nil {
			return err
		}
		*names = checked
		if runF != nil {
			return runF(cmd.Context(), opts)
		}
		return run(cmd.Context(), opts)
	}
}

// EachSandbox runs do on every name in turn with one Manager, prints on stdout each name it
// succeeded for, goes on after a failure, and reports the failures together (ReportFailures).
func EachSandbox(ctx context.Context, f *Factory, io *iostreams.IOStreams, names []string, do func(m *sandbox.Manager, name string) error) error {
	m, err := Manager(ctx, f)
	if err != nil {
		return err
	}
	var failed []error
	for _, name := range names {
		if err := do(m, name); err != nil {
			failed = append(failed, err)
			continue
		}
		fmt.Fprintln(io.Out, name)
	}
	return ReportFailures(io, failed)
}

// NameFlag adds -n/--name, the sandbox a command acts on.
func NameFlag(fs *pflag.FlagSet, name *string) {
	fs.StringVarP(name, "name", "n", "", "sandbox `name` (default: the project's sandbox)")
}

// RunNamed checks the -n name, then calls runF (tests) or run.
func RunNamed[O any](ctx context.Context, name string, opts O, runF, run func(context.Context, O) error) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if runF != nil {
		return runF(ctx, opts)
	}
	return run(ctx, opts)
}
