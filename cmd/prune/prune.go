// Package prune implements "sbx prune".
package prune

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Parallel is how many sandboxes prune removes at once. The engine stopping each one
// (kill, exit, unmounts, network namespace) is most of the time, and overlaps well.
const Parallel = 16

// PruneOptions are the inputs of "sbx prune".
type PruneOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory

	Idle      time.Duration
	IdleSet   bool
	MaxAge    time.Duration
	MaxAgeSet bool
	All       bool
	Filters   []string
	DryRun    bool
	Force     bool
	Busy      bool
	JSON      bool
}

// Report is the --json output of "sbx prune". Field names are stable.
type Report struct {
	DryRun       bool          `json:"dryRun"`
	Removed      []RemovedItem `json:"removed"`
	Failed       []RemovedItem `json:"failed"`
	OrphanStates []string      `json:"orphanStateFiles"`
	// OrphanAgentDirs name removed sandboxes whose agent directory was left behind.
	OrphanAgentDirs []string `json:"orphanAgentDirs"`
	// OrphanCADirs name removed sandboxes whose CA bundle's directory was left behind.
	OrphanCADirs []string `json:"orphanCADirs"`
	// OrphanEgressDirs name removed sandboxes whose egress rules and log were left behind.
	OrphanEgressDirs []string `json:"orphanEgressDirs"`
	// OrphanProxies are egress proxy containers of removed sandboxes.
	OrphanProxies []string `json:"orphanProxies"`
	OrphanVolumes []string `json:"orphanVolumes"`
	// OrphanNetworks are networks of their own (network: bridge) and egress networks of
	// removed sandboxes.
	OrphanNetworks []string `json:"orphanNetworks"`
	// StalePooled are pooled sandboxes no longer fresh (not running, or made by another sbx
	// version); fresh ones are never pruned (sbx pool drain removes them).
	StalePooled []string `json:"stalePooled"`
	// Busy sandboxes had a command in flight and were left alone (--busy removes them too).
	Busy []RemovedItem `json:"busy"`
	// NotOurs are sandboxes this user's sbx never used (another user's, on a shared engine):
	// their idle time is unknown here, so only --all removes them.
	NotOurs        []RemovedItem `json:"notOurs"`
	IdleLimit      string        `json:"idleLimit"`
	MaxAgeLimit    string        `json:"maxAgeLimit"`
	RemovedOrphans bool          `json:"removedOrphans"`
}

// RemovedItem is one sandbox prune removed (or would remove), and why.
type RemovedItem struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	Error  string `json:"error,omitempty"`
}

// NewCmdPrune builds "sbx prune".
func NewCmdPrune(f *cmdutil.Factory, runF func(context.Context, *PruneOptions) error) *cobra.Command {
	opts := &PruneOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "prune [flags]",
		Short: "Remove expired sandboxes and the leftovers of removed ones",
		Long: `Remove sbx-managed sandboxes idle longer than prune.idleHours or older than
prune.maxAgeDays, each by its own configuration (--idle and --max-age override for all; 0
disables a rule; --all removes every one), plus state files and private workspace volumes
left by sandboxes that no longer exist. Nothing without sbx's dev.sbx.managed=true label is
ever touched.

A sandbox with a command in flight (exec, cp, sh, run, mcp...) is kept and reported as busy;
--busy removes it anyway, ending that command. A sandbox this user's sbx never used (another
user's, on a shared engine) has no idle time here and is kept unless --all.

Pooled sandboxes (the pool key) are not sandboxes yet and never expire while fresh, even
with --all: prune removes only those that no longer run or were made by another sbx
version; "sbx pool drain" removes the others.

On a terminal prune lists what will go and asks; elsewhere it needs -f (or --dry-run), so
CI writes "sbx prune -f". Exit 1 when any removal failed.`,
		Example: `  sbx prune --dry-run
  sbx prune -f --idle 2h
  sbx prune -f --all --filter project=.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.IdleSet = cmd.Flags().Changed("idle")
			opts.MaxAgeSet = cmd.Flags().Changed("max-age")
			if _, err := sandbox.ParseFilters(opts.Filters); err != nil {
				return err
			}
			if opts.Idle < 0 || opts.MaxAge < 0 {
				return errs.Usagef("--idle and --max-age must not be negative")
			}
			if !opts.Force && !opts.DryRun && !opts.IO.IsStdinTTY() {
				return errs.Usagef("prune removes sandboxes and no terminal is there to confirm").
					WithHint("pass -f to remove without asking, or --dry-run to see what would go")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return pruneRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&opts.Idle, "idle", 0, "remove sandboxes unused for longer than `duration` (default: prune.idleHours)")
	fl.DurationVar(&opts.MaxAge, "max-age", 0, "remove sandboxes older than `duration` (default: prune.maxAgeDays)")
	fl.BoolVar(&opts.All, "all", false, "remove every sandbox (that matches --filter)")
	cmdutil.ListVarP(fl, &opts.Filters, "filter", "", "only sandboxes matching `KEY=VALUE`: project=DIR, name=GLOB, status=STATUS")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "show what would be removed and remove nothing")
	fl.BoolVarP(&opts.Force, "force", "f", false, "remove without asking")
	fl.BoolVar(&opts.Busy, "busy", false, "also remove sandboxes with a command in flight (it is killed)")
	fl.BoolVar(&opts.JSON, "json", false, "print the outcome as JSON")
	return cmd
}

func pruneRun(ctx context.Context, opts *PruneOptions) error {
	f := opts.Factory
	flagRule := sandbox.PruneRule{Idle: opts.Idle, MaxAge: opts.MaxAge, All: opts.All}
	// A rule from the project sbx runs in, for what the flags leave open: shown in the report,
	// and used for a sandbox whose own config cannot be resolved any more.
	rule := flagRule
	if !opts.All && (!opts.IdleSet || !opts.MaxAgeSet) {
		r, err := cmdutil.ResolveConfig(f, "")
		if err != nil {
			return err
		}
		rule = withConfig(flagRule, opts, r.Config)
	}
	filter, _ := sandbox.ParseFilters(opts.Filters)
	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return err
	}
	all, err := m.List(ctx)
	if err != nil {
		return err
	}
	var matching []*sandbox.Sandbox
	for _, sb := range all {
		if filter.Match(sb) {
			matching = append(matching, sb)
		}
	}
	// Each sandbox expires by its own prune settings, unless flags say otherwise.
	ruleFor := func(sb *sandbox.Sandbox) sandbox.PruneRule {
		if opts.All || (opts.IdleSet && opts.MaxAgeSet) {
			return rule
		}
		in, err := m.Resolver.Resolve(sb)
		if err != nil {
			return rule
		}
		return withConfig(flagRule, opts, in.Config)
	}
	cands, notOurs := sandbox.SelectExpired(matching, m.State.LastUsed, f.Now(), ruleFor)
	orphans, err := m.FindOrphans(ctx, all, filter)
	if err != nil {
		return err
	}
	rep := Report{DryRun: opts.DryRun, Removed: []RemovedItem{}, Failed: []RemovedItem{}, Busy: []RemovedItem{}, NotOurs: []RemovedItem{},
		OrphanStates: nonNil(orphans.StateFiles), OrphanAgentDirs: nonNil(orphans.AgentDirs), OrphanCADirs: nonNil(orphans.CADirs),
		OrphanEgressDirs: nonNil(orphans.EgressDirs), OrphanProxies: nonNil(orphans.Proxies), OrphanVolumes: nonNil(orphans.Volumes), OrphanNetworks: nonNil(orphans.Networks),
		StalePooled: nonNil(orphans.StalePooled), IdleLimit: limit(rule.Idle, rule.All), MaxAgeLimit: limit(rule.MaxAge, rule.All)}
	for _, c := range notOurs {
		rep.NotOurs = append(rep.NotOurs, RemovedItem{Name: c.Sandbox.Name, Reason: c.Reason})
	}

	leftovers := orphans.All()
	if !opts.Force && !opts.DryRun && len(cands)+len(leftovers) > 0 {
		for _, c := range cands {
			fmt.Fprintf(opts.IO.ErrOut, "  %s (%s)\n", c.Sandbox.Name, c.Reason)
		}
		if n := len(leftovers); n > 0 {
			fmt.Fprintf(opts.IO.ErrOut, "  %d leftovers of removed sandboxes\n", n)
		}
		if !cmdutil.Confirm(opts.IO, fmt.Sprintf("Remove %d sandboxes? [y/N] ", len(cands))) {
			return errs.New(errors.New("prune cancelled; nothing removed"), errs.CodeError, "")
		}
	}

	var failures []error
	for _, res := range m.RemoveAll(ctx, cands, Parallel, opts.Busy, opts.DryRun) {
		item := RemovedItem{Name: res.Sandbox.Name, Reason: res.Reason}
		switch {
		case res.Busy:
			item.Reason = "a command is in flight"
			rep.Busy = append(rep.Busy, item)
		case res.Err != nil:
			item.Error = res.Err.Error()
			rep.Failed = append(rep.Failed, item)
			failures = append(failures, fmt.Errorf("removing %q: %w", res.Sandbox.Name, res.Err))
		default:
			rep.Removed = append(rep.Removed, item)
		}
	}
	if !opts.DryRun {
		if err := m.RemoveOrphans(ctx, orphans); err != nil {
			failures = append(failures, err)
		} else {
			rep.RemovedOrphans = true
		}
	}

	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, rep); err != nil {
			return err
		}
	} else {
		verb := "removed"
		if opts.DryRun {
			verb = "would remove"
		}
		for _, it := range rep.Removed {
			fmt.Fprintf(opts.IO.Out, "%s %s (%s)\n", verb, it.Name, it.Reason)
		}
		if len(leftovers) > 0 {
			fmt.Fprintf(opts.IO.Out, "%s %d leftovers: %s\n", verb, len(leftovers), strings.Join(leftovers, ", "))
		}
		for _, it := range rep.Busy {
			opts.IO.Progressf("kept %s: a command is in flight (--busy removes it anyway)\n", it.Name)
		}
		if n := len(rep.NotOurs); n > 0 && !opts.IO.Quiet() {
			opts.IO.Progressf("kept %d sandboxes this user's sbx never used (another user's, on a shared engine?): %s\n", n, names(rep.NotOurs))
		}
		if len(rep.Removed) == 0 && len(rep.Failed) == 0 {
			opts.IO.Progressf("nothing to prune (idle limit %s, max age %s)\n", rep.IdleLimit, rep.MaxAgeLimit)
		}
	}
	if err := cmdutil.ReportFailures(opts.IO, failures); err != nil {
		return errs.New(err, errs.CodeError, errs.Hint(err))
	}
	return nil
}

// withConfig fills what the flags left open from a sandbox's prune settings.
func withConfig(rule sandbox.PruneRule, opts *PruneOptions, cfg config.Config) sandbox.PruneRule {
	if !opts.IdleSet {
		rule.Idle = time.Duration(cfg.Prune.IdleHours) * time.Hour
	}
	if !opts.MaxAgeSet {
		rule.MaxAge = time.Duration(cfg.Prune.MaxAgeDays) * 24 * time.Hour
	}
	return rule
}

func names(items []RemovedItem) string {
	var out []string
	for _, it := range items {
		out = append(out, it.Name)
	}
	return strings.Join(out, ", ")
}

func limit(d time.Duration, all bool) string {
	switch {
	case all:
		return "all"
	case d == 0:
		return "off"
	}
	return sandbox.HumanDuration(d)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
