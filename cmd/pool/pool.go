// Package pool implements "sbx pool" and its subcommands, which fill, list and drain the pool
// of started sandboxes that new sandboxes are taken from.
package pool

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// NewCmdPool builds "sbx pool".
func NewCmdPool(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool <command>",
		Short: "Keep sandboxes started ahead of time, so a new one starts at once",
		Long: `With pool: N, sbx keeps N sandboxes of a configuration started and unclaimed. A new
sandbox of that configuration (sbx exec -n NEW, sbx exec --rm, sbx run --rm, sbx create) is
then taken from the pool instead of being created and started: the pooled container is
renamed to the new sandbox's name, and once the command has ended a detached "sbx pool
fill" starts a replacement, which no command waits for.

Only configurations whose mounts say nothing of a project are pooled: workspace none, no
egress, no caCerts, no published ports, no flags given to create. A pooled sandbox has run
nothing but sbx's agent: its tmpfs is empty, and it has its own network as any sandbox.

Pooled sandboxes count against maxRunning: a fill never evicts a sandbox (it stops when
there is no room), and a sandbox that needs room removes pooled ones first. sbx prune never
removes them; "sbx pool drain" does.`,
	}
	cmd.AddCommand(NewCmdFill(f, nil), NewCmdLs(f, nil), NewCmdDrain(f, nil))
	return cmd
}

// Options are the inputs of "sbx pool fill", "ls" and "drain".
type Options struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	// Name resolves the configuration sandbox NAME would get; "" the project's default.
	Name string
	// All, for ls and drain, takes every pooled sandbox of this user, whatever its config.
	All  bool
	JSON bool
}

// NewCmdFill builds "sbx pool fill".
func NewCmdFill(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "fill",
		Short: "Start pooled sandboxes until the pool key's number are ready",
		Long: `Start pooled sandboxes of the project's configuration (or sandbox NAME's with -n) until
as many as its pool key says run, and remove pooled ones of it that no longer run. Fills of
one configuration take turns; under maxRunning a fill stops when there is no room.`,
		Example: `  sbx pool fill
  SBX_POOL=4 sbx pool fill --json`,
		Args: cobra.NoArgs,
		RunE: runE(opts, runF, fillRun),
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	return cmd
}

// NewCmdLs builds "sbx pool ls".
func NewCmdLs(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List pooled sandboxes",
		Long: `List the pooled sandboxes of the project's configuration (or sandbox NAME's with -n; every
one with --all): a table on a terminal, tab-separated values when piped, --json for programs.`,
		Args: cobra.NoArgs,
		RunE: runE(opts, runF, lsRun),
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.All, "all", false, "list the pooled sandboxes of every configuration")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as a JSON array")
	return cmd
}

// NewCmdDrain builds "sbx pool drain".
func NewCmdDrain(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Remove pooled sandboxes",
		Long: `Remove the pooled sandboxes of the project's configuration (or sandbox NAME's with -n; every
one with --all), with their volumes, networks and state. A fill under way is waited for.
Sandboxes already taken from the pool are sandboxes like any other and stay.`,
		Args: cobra.NoArgs,
		RunE: runE(opts, runF, drainRun),
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.All, "all", false, "drain the pooled sandboxes of every configuration")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the names removed as a JSON array")
	return cmd
}

func runE(opts *Options, runF, run func(context.Context, *Options) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if opts.All && opts.Name != "" {
			return errs.Usagef("--all cannot be combined with -n")
		}
		if err := cmdutil.CheckName(opts.Name); err != nil {
			return err
		}
		if runF != nil {
			return runF(cmd.Context(), opts)
		}
		return run(cmd.Context(), opts)
	}
}

// target resolves the configuration the pool command is about: its spec input and pool key.
func target(ctx context.Context, opts *Options) (*sandbox.Manager, *config.Resolved, sandbox.SpecInput, string, error) {
	r, err := cmdutil.ResolveConfig(opts.Factory, opts.Name)
	if err != nil {
		return nil, nil, sandbox.SpecInput{}, "", err
	}
	m, err := cmdutil.Manager(ctx, opts.Factory)
	if err != nil {
		return nil, nil, sandbox.SpecInput{}, "", err
	}
	in, err := m.Resolver.SpecInput(r)
	if err != nil {
		return nil, nil, sandbox.SpecInput{}, "", err
	}
	key, err := sandbox.PoolKey(in)
	return m, r, in, key, err
}

func fillRun(ctx context.Context, opts *Options) error {
	m, r, in, _, err := target(ctx, opts)
	if err != nil {
		return err
	}
	if why := sandbox.Unpoolable(in); why != "" {
		return errs.Failure(fmt.Errorf("this configuration is not pooled: %s", why),
			"set workspace: none (and leave out egress and caCerts) for a configuration sbx can pool; sbx explain shows where each key is set")
	}
	res, err := m.FillPool(ctx, in, r.Config.Pool)
	if err != nil {
		return err
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, res)
	}
	if r.Config.Pool == 0 {
		opts.IO.Progressf("pool is 0 (from %s): nothing to fill\n", r.Source("pool"))
	}
	if res.NoRoom {
		opts.IO.Progressf("maxRunning %d leaves no room for more pooled sandboxes\n", r.Config.MaxRunning)
	}
	fmt.Fprintf(opts.IO.Out, "pool %s: %d of %d ready (%d started, %d stale removed)\n", res.Key, res.Ready, res.Want, len(res.Created), len(res.Removed))
	return nil
}

// Entry is one pooled sandbox in "sbx pool ls --json". Field names are stable.
type Entry struct {
	Name       string    `json:"name"`
	ID         string    `json:"id"`
	Key        string    `json:"key"`
	Status     string    `json:"status"`
	Image      string    `json:"image"`
	Project    string    `json:"project"`
	ConfigHash string    `json:"configHash"`
	CreatedAt  time.Time `json:"createdAt"`
}

// scope is the pool key ls and drain are about: the resolved configuration's, or "" (every
// key) with --all.
func scope(ctx context.Context, opts *Options) (*sandbox.Manager, string, error) {
	if opts.All {
		m, err := cmdutil.Manager(ctx, opts.Factory)
		return m, "", err
	}
	m, _, _, key, err := target(ctx, opts)
	return m, key, err
}

func lsRun(ctx context.Context, opts *Options) error {
	m, key, err := scope(ctx, opts)
	if err != nil {
		return err
	}
	list, err := m.ListPool(ctx, key)
	if err != nil {
		return err
	}
	entries := make([]Entry, 0, len(list))
	for _, p := range list {
		entries = append(entries, Entry{Name: p.Name, ID: p.ID, Key: p.Labels[sandbox.LabelPool], Status: p.Status, Image: p.Image,
			Project: p.Labels[sandbox.LabelProject], ConfigHash: p.Hash(), CreatedAt: p.CreatedAt})
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, entries)
	}
	now := opts.Factory.Now()
	t := cmdutil.Table{Headers: []string{"NAME", "KEY", "STATUS", "AGE", "IMAGE", "PROJECT"}}
	for _, e := range entries {
		t.Rows = append(t.Rows, []string{e.Name, e.Key, e.Status, sandbox.HumanDuration(now.Sub(e.CreatedAt)), e.Image, e.Project})
	}
	t.Print(opts.IO)
	return nil
}

func drainRun(ctx context.Context, opts *Options) error {
	m, key, err := scope(ctx, opts)
	if err != nil {
		return err
	}
	removed, err := m.DrainPool(ctx, key)
	if opts.JSON {
		if werr := cmdutil.WriteJSON(opts.IO.Out, removed); werr != nil && err == nil {
			err = werr
		}
		return err
	}
	for _, name := range removed {
		fmt.Fprintln(opts.IO.Out, name)
	}
	noun := "sandboxes"
	if len(removed) == 1 {
		noun = "sandbox"
	}
	opts.IO.Progressf("removed %d pooled %s\n", len(removed), noun)
	return err
}
