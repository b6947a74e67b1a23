// Package ls implements "sbx ls".
package ls

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/internal/procs"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// LsOptions are the inputs of "sbx ls".
type LsOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	JSON    bool
	Quiet   bool
	Filters []string
	// AllContexts lists the sandboxes of every docker context's engine, not only the one in use.
	AllContexts bool
}

// Entry is one sandbox in "sbx ls --json". Field names are stable.
type Entry struct {
	Name       string            `json:"name"`
	Context    string            `json:"context,omitempty"` // the docker context, with --all-contexts
	ID         string            `json:"id"`
	Container  string            `json:"container"`
	Status     string            `json:"status"`
	Profile    string            `json:"profile"`
	Image      string            `json:"image"`
	Workspace  Workspace         `json:"workspace"`
	Project    string            `json:"project"`
	CreatedAt  time.Time         `json:"createdAt"`
	LastUsedAt *time.Time        `json:"lastUsedAt"`
	Config     string            `json:"config"` // ok, changed, or unknown (its config cannot be resolved)
	ConfigHash string            `json:"configHash"`
	Changed    []string          `json:"changedKeys,omitempty"`
	Ports      []string          `json:"ports"`
	Labels     map[string]string `json:"labels"`
	IdleStop   string            `json:"idleStop,omitempty"` // the idleStop it was made with, when not 0
	// IdleStopAt is when a running sandbox stops for idleness if it stays unused; absent when
	// it is in use ("stops": "when idle"), stopped, or was made without idleStop.
	IdleStopAt *time.Time `json:"idleStopAt,omitempty"`
	Stops      string     `json:"stops"` // what the table's STOPS column says
}

// Workspace is what a sandbox has at /workspace.
type Workspace struct {
	Mode string `json:"mode"`
	Path string `json:"path"` // the project root, or the volume for mode none
	// Carriage is how it got there: bind, overlay, volume (none), or copy (a copy of the
	// project in the sandbox's volume, on an engine that cannot see it).
	Carriage string `json:"carriage"`
}

// NewCmdLs builds "sbx ls".
func NewCmdLs(f *cmdutil.Factory, runF func(context.Context, *LsOptions) error) *cobra.Command {
	opts := &LsOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Long: `List the sandboxes sbx manages: status, image, workspace, age, time since last use,
whether the configuration it was created with still matches the resolved one (CONFIG ok or
changed), and, for one made with idleStop, when it stops by itself (STOPS: "in 4m" if it stays
unused, "when idle" while something runs in it). A table on a terminal, tab-separated values when piped, --json for programs.`,
		Example: `  sbx ls
  sbx ls --filter status=running --filter name='web-*'
  sbx ls -q | xargs sbx rm -f`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := sandbox.ParseFilters(opts.Filters); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return lsRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as a JSON array")
	cmd.Flags().BoolVarP(&opts.Quiet, "quiet", "q", false, "print names only")
	cmd.Flags().BoolVar(&opts.AllContexts, "all-contexts", false, "list the sandboxes on the engine of every docker context")
	cmdutil.ListVarP(cmd.Flags(), &opts.Filters, "filter", "", "keep sandboxes matching `KEY=VALUE`: project=DIR, name=GLOB, status=STATUS")
	return cmd
}

func lsRun(ctx context.Context, opts *LsOptions) error {
	f := opts.Factory
	var entries []Entry
	if !opts.AllContexts {
		var err error
		if entries, err = list(ctx, f, opts.Filters); err != nil {
			return err
		}
	} else {
		home, _ := f.HomeDir()
		names, err := engine.Contexts(f.Getenv, home)
		if err != nil {
			return err
		}
		// An engine that is down or gone leaves the others to list: the user learns which.
		for _, name := range names {
			got, err := list(ctx, f.ForContext(name), opts.Filters)
			if err != nil {
				fmt.Fprintf(opts.IO.ErrOut, "warning: context %s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", " "))
				continue
			}
			for i := range got {
				got[i].Context = name
			}
			entries = append(entries, got...)
		}
	}
	return render(opts, entries)
}

// list is the entries of the sandboxes on f's engine that filters keep, sorted by name.
func list(ctx context.Context, f *cmdutil.Factory, filters []string) ([]Entry, error) {
	filter, _ := sandbox.ParseFilters(filters)
	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return nil, err
	}
	list, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	var matching []*sandbox.Sandbox
	for _, sb := range list {
		if filter.Match(sb) {
			matching = append(matching, sb)
		}
	}
	// Each entry resolves its sandbox's config from files: spread them over the CPUs.
	procs.All()
	entries := make([]Entry, len(matching))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(matching)) {
		wg.Go(func() {
			for i := range next {
				entries[i] = entryFor(ctx, m, matching[i], f.Now())
			}
		})
	}
	for i := range matching {
		next <- i
	}
	close(next)
	wg.Wait()
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return entries, nil
}

func render(opts *LsOptions, entries []Entry) error {
	f := opts.Factory
	switch {
	case opts.JSON:
		return cmdutil.WriteJSON(opts.IO.Out, entries)
	case opts.Quiet:
		for _, e := range entries {
			fmt.Fprintln(opts.IO.Out, e.Name)
		}
		return nil
	}
	now := f.Now()
	rows := make([][]string, 0, len(entries))
	running, paused := 0, 0
	for _, e := range entries {
		switch e.Status {
		case "running":
			running++
		case "paused":
			paused++
		}
		idle := "-"
		if e.LastUsedAt != nil {
			idle = sandbox.HumanDuration(now.Sub(*e.LastUsedAt))
		}
		image := e.Profile
		if image == "" || !strings.HasPrefix(e.Image, "sbx-sandbox") {
			image = e.Image
		}
		ws := e.Workspace.Mode + " " + e.Workspace.Path
		if e.Workspace.Carriage == sandbox.CarryCopy {
			ws = e.Workspace.Mode + " copy of " + e.Workspace.Path
		}
		if len(e.Ports) > 0 {
			ws += " ports " + strings.Join(e.Ports, ",")
		}
		row := []string{e.Name, e.Status, image, ws, sandbox.HumanDuration(now.Sub(e.CreatedAt)), idle, e.Config, e.Stops}
		if opts.AllContexts {
			row = append([]string{e.Context}, row...)
		}
		rows = append(rows, row)
	}
	headers := []string{"NAME", "STATUS", "PROFILE/IMAGE", "WORKSPACE", "AGE", "IDLE", "CONFIG", "STOPS"}
	shift := 0
	if opts.AllContexts {
		headers, shift = append([]string{"CONTEXT"}, headers...), 1
	}
	t := cmdutil.Table{
		Headers: headers,
		Rows:    rows,
		Color: func(row, col int) lipgloss.Color {
			col -= shift
			switch {
			case col == 1 && rows[row][1+shift] == "running":
				return "2"
			case col == 1 && rows[row][1+shift] == "paused":
				return "3"
			case col == 6 && rows[row][6+shift] == "changed":
				return "3"
			}
			return ""
		},
	}
	t.Print(opts.IO)
	footer := fmt.Sprintf("%d sandboxes (%d running)", len(entries), running)
	if paused > 0 {
		footer = fmt.Sprintf("%d sandboxes (%d running, %d paused)", len(entries), running, paused)
	}
	if opts.IO.IsStdoutTTY() {
		fmt.Fprintln(opts.IO.Out, footer)
	} else {
		fmt.Fprintln(opts.IO.ErrOut, footer)
	}
	return nil
}

func entryFor(ctx context.Context, m *sandbox.Manager, sb *sandbox.Sandbox, now time.Time) Entry {
	e := Entry{
		Name: sb.Name, ID: sb.ID, Container: sandbox.ContainerName(sb.Name), Status: sb.Status,
		Profile: sb.Labels[sandbox.LabelProfile], Image: sb.Image, Project: sb.Labels[sandbox.LabelProject],
		CreatedAt: sb.CreatedAt.UTC(), ConfigHash: sb.Hash(), Labels: sb.Labels, Ports: sb.Ports,
		Workspace: Workspace{Mode: sb.Labels[sandbox.LabelWorkspace], Path: sb.Labels[sandbox.LabelProject], Carriage: sandbox.CarriageOf(sb)},
	}
	if e.Ports == nil {
		e.Ports = []string{}
	}
	if e.Workspace.Mode == "none" {
		e.Workspace.Path = sb.WorkspaceVolume()
	}
	if t, ok := m.State.LastUsed(sb.Name); ok {
		t = t.UTC()
		e.LastUsedAt = &t
	}
	switch d, err := m.Resolver.Drift(sb, nil); {
	case err != nil:
		e.Config = "unknown"
	case d.Current:
		e.Config = "ok"
	default:
		e.Config, e.Changed = "changed", d.Keys
	}
	e.Stops = "-"
	if idle := sb.IdleStop(); idle > 0 {
		e.IdleStop = config.FormatDuration(idle)
		if sb.Status == "running" {
			e.Stops = stopsIn(ctx, m, sb, now, &e)
		}
	}
	return e
}

// stopsIn asks the agent of running sandbox sb when it stops for idleness: "in 4m" (and
// e.IdleStopAt), "when idle" while something uses it, "?" when the agent cannot say.
func stopsIn(ctx context.Context, m *sandbox.Manager, sb *sandbox.Sandbox, now time.Time, e *Entry) string {
	st, ok, err := m.IdleStatus(ctx, sb)
	switch {
	case err != nil || !ok || st.Off:
		return "?"
	case st.Busy:
		return "when idle"
	}
	at := now.Add(st.Left).UTC().Truncate(time.Second)
	e.IdleStopAt = &at
	return "in " + sandbox.HumanDuration(st.Left)
}
