// Package explain implements "sbx explain".
package explain

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
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
	// EgressRuntime reads the sandbox's runtime egress changes; nil when it has none.
	EgressRuntime func(ctx context.Context, r *config.Resolved) *explain.EgressRuntime

	Name string
	Tool string
	// EgressHost and EgressPort are --egress HOST[:PORT].
	EgressHost string
	EgressPort int
	JSON       bool
	Check      bool
	Config     *cmdutil.ConfigFlags
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
		EgressRuntime: func(ctx context.Context, r *config.Resolved) *explain.EgressRuntime {
			// What the engine or the state directory cannot say, explain leaves out: the
			// live section reports an engine that does not answer.
			m, err := cmdutil.Manager(ctx, f)
			if err != nil {
				return nil
			}
			rt, ok, err := m.EgressRuntime(ctx, r.Name)
			if err != nil || !ok {
				return nil
			}
			return &explain.EgressRuntime{Allowed: rt.Allowed, Denied: rt.Denied}
		},
	}
	var egressDest string
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
			if egressDest != "" {
				var err error
				if opts.EgressHost, opts.EgressPort, err = parseDest(egressDest); err != nil {
					return err
				}
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
	fl.StringVar(&egressDest, "egress", "", "show whether the sandbox's egress proxy lets it reach `HOST[:PORT]` (port 443 when not given), and by which rule")
	opts.Config = cmdutil.AddConfigFlags(fl, "egress")
	return cmd
}

func explainRun(ctx context.Context, opts *ExplainOptions) error {
	r, err := opts.Resolve(opts.Name, opts.Config.Layer())
	var verr *config.ValidationError
	if err != nil && !errors.As(err, &verr) {
		return err
	}
	eo := explain.Options{Tool: opts.Tool, EgressHost: opts.EgressHost, EgressPort: opts.EgressPort}
	if !opts.Check && opts.EgressRuntime != nil && len(r.Config.Egress) > 0 {
		eo.EgressRuntime = opts.EgressRuntime(ctx, r)
	}
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

// parseDest splits --egress HOST[:PORT]; an IPv6 address with a port is written in brackets.
func parseDest(dest string) (string, int, error) {
	host, port := dest, 443
	if strings.HasPrefix(dest, "[") || strings.Count(dest, ":") == 1 {
		h, p, err := net.SplitHostPort(dest)
		n, perr := strconv.Atoi(p)
		if err != nil || perr != nil || n < 1 || n > 65535 {
			return "", 0, errs.Usagef("--egress %q is not HOST or HOST:PORT", dest).WithHint("write it as pypi.org, pypi.org:443, 10.1.2.3:5432 or [::1]:80")
		}
		host, port = h, n
	}
	if host == "" {
		return "", 0, errs.Usagef("--egress %q names no host", dest)
	}
	return host, port, nil
}
