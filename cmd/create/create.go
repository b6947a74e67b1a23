// Package create implements "sbx create".
package create

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// CreateOptions are the inputs of "sbx create".
type CreateOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	Replace bool
	JSON    bool
	Layer   []config.Setting
}

// Result is the --json output of "sbx create".
type Result struct {
	Name      string `json:"name"`
	Container string `json:"container"`
	ID        string `json:"id"`
	Action    string `json:"action"` // created, started, resumed, ready, replaced
	Image     string `json:"image"`
	Project   string `json:"project"`
}

// NewCmdCreate builds "sbx create".
func NewCmdCreate(f *cmdutil.Factory, runF func(context.Context, *CreateOptions) error) *cobra.Command {
	opts := &CreateOptions{IO: f.IOStreams, Factory: f}
	var flags *cmdutil.ConfigFlags
	cmd := &cobra.Command{
		Use:   "create [-n NAME] [flags]",
		Short: "Create and start a sandbox, or make sure it is ready",
		Long: `Create and start a sandbox from the resolved configuration (see "sbx explain"). Running it
again is safe: an existing sandbox with the same configuration is started if stopped and
reported ready. One whose configuration changed is refused with the keys that differ,
unless --replace, which recreates it (tmpfs contents are lost; the workspace is kept).`,
		Example: `  sbx create
  sbx create -n web --profile common --network bridge --memory 2g
  sbx create --replace`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Name != "" {
				if err := config.ValidName(opts.Name); err != nil {
					return errs.Usagef("%v", err)
				}
			}
			opts.Layer = flags.Layer()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return createRun(cmd.Context(), opts)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.Replace, "replace", false, "recreate the sandbox when its configuration changed")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	flags = cmdutil.AddConfigFlags(cmd.Flags())
	return cmd
}

func createRun(ctx context.Context, opts *CreateOptions) error {
	f := opts.Factory
	r, err := cmdutil.ResolveConfig(f, opts.Name, opts.Layer...)
	if err != nil {
		return err
	}
	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return err
	}
	in, err := m.Resolver.SpecInput(r)
	if err != nil {
		return err
	}
	in.CreateSettings = opts.Layer
	before, err := m.Inspect(ctx, r.Name)
	if err != nil && !sandbox.IsNotFound(err) {
		return err
	}
	res, err := m.Ensure(ctx, in, sandbox.EnsureOptions{Replace: opts.Replace})
	if err != nil {
		return err
	}
	res.Lease.Release()
	if res.Created {
		cmdutil.WarnCreated(opts.IO, r)
	}
	_ = m.State.Touch(r.Name)
	action := "ready"
	switch {
	case res.Created && before != nil:
		action = "replaced"
	case res.Created:
		action = "created"
	case before != nil && before.Status == "paused":
		action = "resumed"
	case before != nil && before.Status != "running":
		action = "started"
	}
	out := Result{Name: r.Name, Container: sandbox.ContainerName(r.Name), ID: res.Sandbox.ID, Action: action, Image: r.Config.Image, Project: r.ProjectRoot}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, out)
	}
	fmt.Fprintf(opts.IO.Out, "%s %s (%s, workspace %s %s)\n", out.Name, action, out.Image, r.Config.Workspace, r.ProjectRoot)
	return nil
}
