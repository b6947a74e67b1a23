// Package stats implements "sbx stats".
package stats

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	units "github.com/docker/go-units"
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/stats"
)

// StatsOptions are the inputs of "sbx stats".
type StatsOptions struct {
	IO       *iostreams.IOStreams
	Factory  *cmdutil.Factory
	Names    []string
	JSON     bool
	NoStream bool
}

// NewCmdStats builds "sbx stats".
func NewCmdStats(f *cmdutil.Factory, runF func(context.Context, *StatsOptions) error) *cobra.Command {
	opts := &StatsOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "stats [NAME...] [--json] [--no-stream]",
		Short: "Show the CPU, memory, process and I/O use of sandboxes",
		Long: `Show each sandbox's CPU use (100% is one whole CPU), memory use (without the page cache)
and limit, processes and their limit, and block and network I/O since it started, as the
engine measures them. Without names, every running or paused sandbox.

On a terminal the table refreshes every second until Ctrl-C; piped, with --no-stream or
with --json, sbx prints one snapshot (it takes about a second to measure CPU use). The
--json fields are name, id, status, cpuPercent, memoryUsageBytes, memoryLimitBytes,
memoryPercent, pids, pidsLimit, netRxBytes, netTxBytes, blockReadBytes, blockWriteBytes.`,
		Example: `  sbx stats
  sbx stats web --no-stream
  sbx stats --json | jq '.[] | {name, memoryUsageBytes}'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if err := config.ValidName(a); err != nil {
					return errs.Usagef("%v", err)
				}
			}
			opts.Names = args
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return statsRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print one snapshot as a JSON array")
	cmd.Flags().BoolVar(&opts.NoStream, "no-stream", false, "print one snapshot instead of a live table")
	return cmd
}

func statsRun(ctx context.Context, opts *StatsOptions) error {
	m, err := cmdutil.Manager(ctx, opts.Factory)
	if err != nil {
		return err
	}
	list, failed, err := selectSandboxes(ctx, m, opts.Names)
	if err != nil {
		return err
	}
	if opts.JSON || opts.NoStream || !opts.IO.IsStdoutTTY() {
		samples, errs := snapshot(ctx, m, list)
		failed = append(failed, errs...)
		if opts.JSON {
			if err := cmdutil.WriteJSON(opts.IO.Out, samples); err != nil {
				return err
			}
		} else {
			Table(samples).Print(opts.IO)
		}
		return cmdutil.ReportFailures(opts.IO, failed)
	}
	if err := cmdutil.ReportFailures(opts.IO, failed); err != nil {
		return err
	}
	return live(ctx, opts, m, list)
}

// selectSandboxes returns the named sandboxes (those that do not exist are failures), or
// every running and paused one.
func selectSandboxes(ctx context.Context, m *sandbox.Manager, names []string) ([]*sandbox.Sandbox, []error, error) {
	if len(names) > 0 {
		var list []*sandbox.Sandbox
		var failed []error
		for _, n := range names {
			sb, err := m.Inspect(ctx, n)
			if err != nil {
				failed = append(failed, err)
				continue
			}
			list = append(list, sb)
		}
		return list, failed, nil
	}
	all, err := m.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	var list []*sandbox.Sandbox
	for _, sb := range all {
		if sb.Status == "running" || sb.Status == "paused" {
			list = append(list, sb)
		}
	}
	slices.SortFunc(list, func(a, b *sandbox.Sandbox) int { return strings.Compare(a.Name, b.Name) })
	return list, nil, nil
}

// snapshot samples every sandbox at once; a stopped one has no use to report.
func snapshot(ctx context.Context, m *sandbox.Manager, list []*sandbox.Sandbox) ([]stats.Stats, []error) {
	samples := make([]stats.Stats, len(list))
	failures := make([]error, len(list))
	var wg sync.WaitGroup
	for i, sb := range list {
		if sb.Status != "running" && sb.Status != "paused" {
			samples[i] = stats.Stats{Name: sb.Name, ID: sb.ID, Status: sb.Status, CPUPercent: -1}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			samples[i], failures[i] = stats.Sample(ctx, m.Engine, sb, false)
		}()
	}
	wg.Wait()
	var kept []stats.Stats
	var failed []error
	for i := range samples {
		if failures[i] != nil {
			failed = append(failed, failures[i])
			continue
		}
		kept = append(kept, samples[i])
	}
	if kept == nil {
		kept = []stats.Stats{}
	}
	return kept, failed
}

// live redraws the table every second from one stats stream per sandbox until ctx ends.
// Without names it follows sandboxes as they start, pause and go.
func live(ctx context.Context, opts *StatsOptions, m *sandbox.Manager, list []*sandbox.Sandbox) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	latest := map[string]stats.Stats{}
	streams := map[string]context.CancelFunc{}
	follow := func(list []*sandbox.Sandbox) {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, sb := range list {
			seen[sb.ID] = true
			if _, ok := streams[sb.ID]; ok {
				continue
			}
			// A first sample at once, so the table is not empty for a second.
			if s, err := stats.Sample(ctx, m.Engine, sb, true); err == nil {
				latest[sb.ID] = s
			}
			sctx, stop := context.WithCancel(ctx)
			streams[sb.ID] = stop
			go func() {
				_ = stats.Stream(sctx, m.Engine, sb, func(s stats.Stats) {
					mu.Lock()
					defer mu.Unlock()
					if _, ok := streams[sb.ID]; ok {
						latest[sb.ID] = s
					}
				})
			}()
		}
		for id, stop := range streams {
			if !seen[id] {
				stop()
				delete(streams, id)
				delete(latest, id)
			}
		}
	}
	follow(list)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 0; ; n++ {
		mu.Lock()
		rows := make([]stats.Stats, 0, len(latest))
		for _, s := range latest {
			rows = append(rows, s)
		}
		mu.Unlock()
		slices.SortFunc(rows, func(a, b stats.Stats) int { return strings.Compare(a.Name, b.Name) })
		fmt.Fprint(opts.IO.Out, "\x1b[H\x1b[2J")
		Table(rows).Print(opts.IO)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if len(opts.Names) == 0 && n%3 == 2 {
			if list, _, err := selectSandboxes(ctx, m, nil); err == nil {
				follow(list)
			}
		}
	}
}

// Table lays stats out as docker stats does.
func Table(samples []stats.Stats) cmdutil.Table {
	t := cmdutil.Table{Headers: []string{"NAME", "STATUS", "CPU %", "MEM USAGE / LIMIT", "MEM %", "PIDS", "NET I/O", "BLOCK I/O"}}
	for _, s := range samples {
		cpu := "-"
		if s.CPUPercent >= 0 {
			cpu = fmt.Sprintf("%.2f%%", s.CPUPercent)
		}
		pids := fmt.Sprint(s.PIDs)
		if s.PIDsLimit > 0 {
			pids += " / " + fmt.Sprint(s.PIDsLimit)
		}
		t.Rows = append(t.Rows, []string{s.Name, s.Status, cpu,
			units.BytesSize(float64(s.MemoryUsage)) + " / " + units.BytesSize(float64(s.MemoryLimit)),
			fmt.Sprintf("%.2f%%", s.MemoryPercent), pids,
			units.HumanSizeWithPrecision(float64(s.NetRx), 3) + " / " + units.HumanSizeWithPrecision(float64(s.NetTx), 3),
			units.HumanSizeWithPrecision(float64(s.BlockRead), 3) + " / " + units.HumanSizeWithPrecision(float64(s.BlockWrite), 3)})
	}
	return t
}
