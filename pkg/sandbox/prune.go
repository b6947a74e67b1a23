package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Filter selects sandboxes for ls and prune: project=DIR, name=GLOB, status=STATUS.
type Filter struct {
	Projects []string
	Names    []string
	Statuses []string
}

// ParseFilters reads --filter values.
func ParseFilters(values []string) (Filter, error) {
	var f Filter
	for _, v := range values {
		key, val, ok := strings.Cut(v, "=")
		if !ok || val == "" {
			return f, errs.Usagef("bad filter %q: want KEY=VALUE", v).WithHint("filters are project=DIR, name=GLOB, status=running|exited|created|paused")
		}
		switch key {
		case "project":
			abs, err := filepath.Abs(val)
			if err != nil {
				return f, errs.Usagef("bad filter %q: %v", v, err)
			}
			f.Projects = append(f.Projects, abs)
		case "name":
			if _, err := path.Match(val, ""); err != nil {
				return f, errs.Usagef("bad filter %q: %v", v, err)
			}
			f.Names = append(f.Names, val)
		case "status":
			f.Statuses = append(f.Statuses, val)
		default:
			return f, errs.Usagef("unknown filter key %q in %q", key, v).WithHint("filters are project=DIR, name=GLOB, status=running|exited|created|paused")
		}
	}
	return f, nil
}

// Match reports whether sb passes the filter: each given key must match one of its values.
func (f Filter) Match(sb *Sandbox) bool {
	anyOf := func(vals []string, ok func(string) bool) bool {
		if len(vals) == 0 {
			return true
		}
		for _, v := range vals {
			if ok(v) {
				return true
			}
		}
		return false
	}
	return anyOf(f.Projects, func(p string) bool { return sb.Labels[LabelProject] == p }) &&
		anyOf(f.Names, func(g string) bool { m, _ := path.Match(g, sb.Name); return m }) &&
		anyOf(f.Statuses, func(s string) bool { return sb.Status == s })
}

// PruneRule says which sandboxes have expired; a zero duration disables its rule.
type PruneRule struct {
	Idle   time.Duration
	MaxAge time.Duration
	All    bool
}

// PruneCandidate is a sandbox that will go, and why.
type PruneCandidate struct {
	Sandbox *Sandbox
	Reason  string
}

// SelectExpired picks the sandboxes that their rule expires at now, and says which it passed
// over because this user's sbx never used them: on a shared engine another user's sandbox has
// no last-use record here, and its creation time says nothing about its use. It is pure.
func SelectExpired(list []*Sandbox, lastUsed func(string) (time.Time, bool), now time.Time, ruleFor func(*Sandbox) PruneRule) (expired, notOurs []PruneCandidate) {
	for _, sb := range list {
		rule := ruleFor(sb)
		last, ours := lastUsed(sb.Name)
		idle, age := now.Sub(last), now.Sub(sb.CreatedAt)
		switch {
		case rule.All:
			expired = append(expired, PruneCandidate{sb, "--all"})
		case !ours:
			notOurs = append(notOurs, PruneCandidate{sb, "no use recorded by this user"})
		case rule.MaxAge > 0 && age > rule.MaxAge:
			expired = append(expired, PruneCandidate{sb, fmt.Sprintf("age %s > %s", HumanDuration(age), HumanDuration(rule.MaxAge))})
		case rule.Idle > 0 && idle > rule.Idle:
			expired = append(expired, PruneCandidate{sb, fmt.Sprintf("idle %s > %s", HumanDuration(idle), HumanDuration(rule.Idle))})
		}
	}
	return expired, notOurs
}

// PruneResult is the outcome for one sandbox. Busy means a command was in flight in it, so
// it was left alone.
type PruneResult struct {
	PruneCandidate
	Busy bool
	Err  error
}

// RemoveAll removes the candidates with at most parallel removals at once. Each removal holds
// the sandbox's lease exclusively, as eviction does: a sandbox with a command in flight is left
// alone (Busy) unless busyToo, and no command can start in one while it goes. With dryRun it
// only finds which are busy.
func (m *Manager) RemoveAll(ctx context.Context, cands []PruneCandidate, parallel int, busyToo, dryRun bool) []PruneResult {
	results := make([]PruneResult, len(cands))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = PruneResult{PruneCandidate: c}
			lease, err := m.exclusiveLease(ctx, c.Sandbox.Name)
			switch {
			case errors.Is(err, flock.ErrLocked) && !busyToo:
				results[i].Busy = true
				return
			case errors.Is(err, flock.ErrLocked):
			case err != nil:
				results[i].Err = err
				return
			}
			defer lease.Release()
			if !dryRun {
				results[i].Err = m.removeContainer(ctx, c.Sandbox, true)
			}
		}()
	}
	wg.Wait()
	return results
}

// exclusiveLease takes sandbox name's lease exclusively without waiting: flock.ErrLocked when a
// command holds it. Without a state dir nothing can be in flight that sbx knows of.
func (m *Manager) exclusiveLease(ctx context.Context, name string) (*Lease, error) {
	if m.State == nil {
		return nil, nil
	}
	path := m.State.leasePath(name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil
	}
	f, err := flock.Open(ctx, path, true, false)
	if err != nil {
		if errors.Is(err, flock.ErrLocked) {
			return nil, err
		}
		return nil, errs.Failure(fmt.Errorf("checking the lease of sandbox %q: %w", name, err), "")
	}
	return &Lease{f: f}, nil
}

// Orphans are leftovers of removed sandboxes: state files, agent and CA directories,
// labelled workspace volumes and networks whose container is gone.
type Orphans struct {
	StateFiles []string
	// AgentDirs name sandboxes whose agent directory is left (an sbx killed during rm).
	AgentDirs []string
	// CADirs name sandboxes whose CA bundle's directory is left (cacerts.go).
	CADirs []string
	// EgressDirs name sandboxes whose egress directory (rules and log) is left.
	EgressDirs []string
	// OverlayDirs name sandboxes whose overlay layers (their unapplied changes) are left.
	OverlayDirs []string
	// Proxies are egress proxy containers whose sandbox is gone (egress.go).
	Proxies  []string
	Volumes  []string
	Networks []string
	// StalePooled are pooled sandboxes (pool.go) no longer fresh: not running (stopped for
	// idleness, or by a restart of the engine), or made by another sbx version, whose pool
	// key this sbx never computes. Fresh ones are never pruned: sbx pool drain removes them.
	StalePooled []string
}

// areas are every Area, in the order All lists their directories.
var areas = []Area{AreaAgent, AreaCA, AreaEgress, AreaOverlay}

// leftIn is o's list of directories left in area a.
func (o *Orphans) leftIn(a Area) *[]string {
	return map[Area]*[]string{AreaAgent: &o.AgentDirs, AreaCA: &o.CADirs, AreaEgress: &o.EgressDirs, AreaOverlay: &o.OverlayDirs}[a]
}

// All lists every leftover, the pooled sandboxes as "pool/NAME" and the directories left in
// an area as "AREA/NAME" ("agent/NAME").
func (o Orphans) All() []string {
	all := slices.Concat(o.StateFiles, o.Proxies, o.Volumes, o.Networks)
	for _, n := range o.StalePooled {
		all = append(all, "pool/"+n)
	}
	for _, a := range areas {
		for _, n := range *o.leftIn(a) {
			all = append(all, string(a)+"/"+n)
		}
	}
	return all
}

// FindOrphans lists leftovers that match filter, given the sandboxes that still exist. A state
// file carries only a name, so a project filter never matches one.
func (m *Manager) FindOrphans(ctx context.Context, existing []*Sandbox, filter Filter) (Orphans, error) {
	alive := map[string]bool{}
	for _, sb := range existing {
		alive[sb.Name], alive[sb.key()] = true, true
	}
	// Pooled sandboxes are no sandboxes yet, but what is named after them is in use.
	records, err := m.State.poolRecords()
	if err != nil {
		return Orphans{}, err
	}
	for name := range records {
		alive[name] = true
	}
	var o Orphans
	pooled, err := m.ListPool(ctx, "")
	if err != nil {
		return o, err
	}
	for _, p := range pooled {
		stale := p.Status != "running" || (m.Resolver != nil && p.Labels[LabelVersion] != m.Resolver.Version)
		if stale && filter.Match(p) {
			o.StalePooled = append(o.StalePooled, p.Name)
		}
	}
	names, err := m.State.Names()
	if err != nil {
		return o, err
	}
	for _, n := range names {
		if !alive[n] && filter.Match(&Sandbox{Name: n}) {
			o.StateFiles = append(o.StateFiles, n)
		}
	}
	for _, a := range areas {
		if names, err = m.State.namesIn(a); err != nil {
			return o, err
		}
		for _, n := range names {
			if !alive[n] && filter.Match(&Sandbox{Name: n}) {
				*o.leftIn(a) = append(*o.leftIn(a), n)
			}
		}
	}
	vols, err := m.Engine.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelManaged+"=true"))})
	if err != nil {
		return o, errs.Engine("listing volumes", err)
	}
	for _, v := range vols.Volumes {
		// Only a workspace volume sbx made: its labels, a name sbx could have given, and the
		// volume name that follows from it.
		name := v.Labels[LabelName]
		if v.Labels[LabelManaged] == "true" && config.ValidName(name) == nil && (v.Name == VolumeName(name) || v.Name == OverlayVolumeName(name)) && !alive[name] &&
			filter.Match(&Sandbox{Name: name, Labels: v.Labels}) {
			o.Volumes = append(o.Volumes, v.Name)
		}
	}
	if o.Proxies, err = m.orphanProxies(ctx, alive, filter); err != nil {
		return o, err
	}
	o.Networks, err = m.orphanNetworks(ctx, alive, filter)
	return o, err
}

// RemoveOrphans deletes what FindOrphans found and returns the first failure.
func (m *Manager) RemoveOrphans(ctx context.Context, o Orphans) error {
	var first error
	for _, n := range o.StateFiles {
		if err := m.State.Remove(n); err != nil && first == nil {
			first = err
		}
	}
	for _, a := range areas {
		for _, n := range *o.leftIn(a) {
			if err := m.removeOrphanDir(ctx, n, a); err != nil && first == nil {
				first = err
			}
		}
	}
	for _, n := range o.StalePooled {
		if err := m.removePooled(ctx, n); err != nil && first == nil {
			first = err
		}
	}
	// Proxies first: a network with a container on it cannot go.
	for _, p := range o.Proxies {
		if err := m.Engine.ContainerRemove(ctx, p, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) && first == nil {
			first = errs.Engine("removing egress proxy "+p, err)
		}
	}
	for _, v := range o.Volumes {
		if err := m.Engine.VolumeRemove(ctx, v, false); err != nil && first == nil {
			first = errs.Engine("removing volume "+v, err)
		}
	}
	for _, n := range o.Networks {
		if err := m.Engine.NetworkRemove(ctx, n); err != nil && !cerrdefs.IsNotFound(err) && first == nil {
			first = errs.Engine("removing network "+n, err)
		}
	}
	return first
}

// removeOrphanDir removes the directory sandbox name left in area a, unless a start or
// create holds its lock or the sandbox exists again (a create since FindOrphans listed it).
func (m *Manager) removeOrphanDir(ctx context.Context, name string, a Area) error {
	what := string(a) + " directory"
	if a == AreaCA {
		what = "CA directory"
	}
	lockPath, dir := m.State.LockIn(a, name), m.State.DirIn(a, name)
	lock, err := flock.Open(ctx, lockPath, true, false)
	if errors.Is(err, flock.ErrLocked) {
		return nil // a start or a create holds it: the directory is in use
	}
	if err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: taking the lock of its %s: %w", name, what, err), "")
	}
	defer lock.Close()
	if _, err := m.Engine.ContainerInspect(ctx, ContainerName(name)); !cerrdefs.IsNotFound(err) {
		if err != nil {
			return errs.Engine(fmt.Sprintf("checking sandbox %q before removing its %s", name, what), err)
		}
		return nil
	}
	if err := m.State.remove(dir); err != nil {
		return errs.Failure(fmt.Errorf("removing the %s of removed sandbox %q: %w", what, name, err),
			"sbx removes nothing outside its state directory; look at that path, and remove it yourself if it should go")
	}
	return m.State.remove(lockPath)
}

// HumanDuration prints d the way ls and prune show ages: 45s, 12m, 5h, 3d.
func HumanDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
