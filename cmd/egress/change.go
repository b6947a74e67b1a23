package egress

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// ChangeOptions are the inputs of "sbx egress allow" and "sbx egress deny".
type ChangeOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Allow   bool
	Name    string
	Dests   []string
}

// NewCmdAllow builds "sbx egress allow".
func NewCmdAllow(f *cmdutil.Factory, runF func(context.Context, *ChangeOptions) error) *cobra.Command {
	return newCmdChange(f, true, runF)
}

// NewCmdDeny builds "sbx egress deny".
func NewCmdDeny(f *cmdutil.Factory, runF func(context.Context, *ChangeOptions) error) *cobra.Command {
	return newCmdChange(f, false, runF)
}

func newCmdChange(f *cmdutil.Factory, allow bool, runF func(context.Context, *ChangeOptions) error) *cobra.Command {
	opts := &ChangeOptions{IO: f.IOStreams, Factory: f, Allow: allow}
	verb, effect := "deny", "closes them, whatever the config's rules allow (a deny entry wins)"
	if allow {
		verb, effect = "allow", "opens them, and takes back an earlier deny of the same text"
	}
	return &cobra.Command{
		Use:   verb + " NAME DEST...",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " destinations for a running sandbox's egress proxy, without a restart",
		Long: fmt.Sprintf(`%s destinations for sandbox NAME's egress proxy: it %s.
A destination is written as in egress: (pypi.org, *.pythonhosted.org, github.com:22,
10.1.2.3:5432, 10.0.0.0/8, @python). The proxy picks the change up within half a second;
the sandbox keeps running. The config stays as it is, so a recreated sandbox has only its
config's rules again: sbx explain NAME shows the runtime changes apart from the config's.`, strings.ToUpper(verb[:1])+verb[1:], effect),
		Example: fmt.Sprintf("  sbx egress %s web registry.npmjs.org\n  sbx egress %s web @node", verb, verb),
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Dests = args[0], args[1:]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return changeRun(cmd.Context(), opts)
		},
	}
}

func changeRun(ctx context.Context, opts *ChangeOptions) error {
	m, err := cmdutil.Manager(ctx, opts.Factory)
	if err != nil {
		return err
	}
	rt, err := m.ChangeEgress(ctx, opts.Name, opts.Allow, opts.Dests)
	if err != nil {
		return err
	}
	writeRuntime(opts, rt)
	return nil
}

func writeRuntime(opts *ChangeOptions, rt sandbox.EgressRuntime) {
	fmt.Fprintf(opts.IO.Out, "sandbox %s: config allows [%s]; allowed at runtime [%s]; denied at runtime [%s]\n", opts.Name,
		cmdutil.SafeText(strings.Join(rt.Configured, ", ")), cmdutil.SafeText(strings.Join(rt.Allowed, ", ")), cmdutil.SafeText(strings.Join(rt.Denied, ", ")))
}
