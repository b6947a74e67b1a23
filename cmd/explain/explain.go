// Package explain implements "sbx explain".
package explain

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/explain"
	"github.com/sbx-sandbox/sbx/pkg/protect"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// ExplainOptions are the inputs of "sbx explain".
type ExplainOptions struct {
	IO *iostreams.IOStreams
	// Resolve resolves a sandbox's config with the flag layer; it never dials the engine.
	Resolve func(name string, flags []config.Setting) (*config.Resolved, error)
	// Live asks the engine about the sandbox. nil means explain cannot ask, and says
	// "not checked"; it is never called with --check.
	Live func(ctx context.Context, r *config.Resolved) (*explain.Live, error)
	// Protect finds the paths a rw workspace keeps read-only; it reads the project only.
	Protect func(r *config.Resolved) (*protect.Plan, error)

	Name   string
	Tool   string
	JSON   bool
	Check  bool
	Config *cmdutil.ConfigFlags
}

// NewCmdExplain builds "sbx explain".
func NewCmdExplain(f *cmdutil.Factory, runF func(context.Context, *ExplainOptions) error) *cobra.Command {
	opts := &ExplainOptions{
		IO: f.IOStreams,
		Resolve: func(name string, flags []config.Setting) (*config.Resolved, error) {
			return cmdutil.ResolveConfig(f, name, flags...)
		},
		Live: func(ctx context.Context, r *config.Resolved) (*explain.Live, error) {
			return cmdutil.LiveState(ctx, f, r)
		},
		Protect: func(r *config.Resolved) (*protect.Plan, error) {
			home, _ := f.HomeDir()
			return sandbox.Protection(r.ProjectRoot, home, r.Config)
		},
	}
	cmd := &cobra.Command{
		Use:   "explain [NAME]",
		Short: "Show a sandbox's resolved config, where each value came from, and its security posture",
		Long: `Show the configuration a sandbox would run with: every key with its value and its source
(default, profile, user file, project file, --config file, SBX_* variable or flag), the
security posture with what each weakened setting risks, validation problems with their
fixes, and the tool policy. When the engine can be asked, it also says whether the
sandbox's container exists and whether its config is current.

NAME is the sandbox; without it, the project's default sandbox. Secret-looking values are
never printed. --check validates only, never contacts the engine, and exits 1 when the
config is refused: use it in CI.`,
		Example: `  sbx explain
  sbx explain web --memory 2g
  sbx explain --tool browser
  sbx explain --check
  sbx explain --json | jq '.settings[] | select(.key == "memory")'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Name = args[0]
			}
			if opts.Tool != "" && !slices.Contains(config.ToolNames, opts.Tool) {
				return errs.Usagef("unknown tool %q", opts.Tool).WithHint("the tools are " + strings.Join(config.ToolNames, ", "))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return explainRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Tool, "tool", "", "show the policy decision for `TOOL` ("+strings.Join(config.ToolNames, ", ")+")")
	fl.BoolVar(&opts.JSON, "json", false, "print as JSON")
	fl.BoolVar(&opts.Check, "check", false, "only validate; exit 1 when the config is refused (never contacts the engine)")
	opts.Config = cmdutil.AddConfigFlags(fl)
	return cmd
}

func explainRun(ctx context.Context, opts *ExplainOptions) error {
	r, err := opts.Resolve(opts.Name, opts.Config.Layer())
	var verr *config.ValidationError
	if err != nil && !errors.As(err, &verr) {
		return err
	}
	eo := explain.Options{Tool: opts.Tool}
	if !opts.Check && opts.Protect != nil {
		plan, err := opts.Protect(r)
		eo.Protected = &explain.Protected{Plan: plan}
		if err != nil {
			eo.Protected.Error = err.Error()
		}
	}
	if !opts.Check && opts.Live != nil {
		live, err := opts.Live(ctx, r)
		if err != nil {
			live = &explain.Live{Error: err.Error()}
		}
		eo.Live = live
	}
	rep := explain.Build(r, eo)
	text := explain.TextOptions{TTY: opts.IO.IsStdoutTTY(), Color: opts.IO.ColorEnabled()}
	switch {
	case opts.JSON:
		err = explain.WriteJSON(opts.IO.Out, rep)
	case opts.Check:
		err = explain.WriteCheck(opts.IO.Out, rep, text)
	default:
		err = explain.WriteText(opts.IO.Out, rep, text)
	}
	if err != nil {
		return err
	}
	if opts.Check && !rep.Valid {
		return &errs.ExitError{Code: errs.CodeError}
	}
	return nil
}
