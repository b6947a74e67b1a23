package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// poolEngine is a fake engine that keeps containers: enough of create, start, list, inspect,
// rename and remove for the pool's life cycle.
type poolEngine struct {
	*enginetest.FakeEngine
	mu      sync.Mutex
	n       int
	byID    map[string]*poolCtr
	volumes map[string]bool
	renames []string
}

type poolCtr struct {
	id, name string
	cfg      *container.Config
	state    container.ContainerState
}

func newPoolEngine(t *testing.T) *poolEngine {
	e := &poolEngine{byID: map[string]*poolCtr{}, volumes: map[string]bool{}}
	e.FakeEngine = &enginetest.FakeEngine{T: t,
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) { return image.InspectResponse{}, nil },
		VolumeCreateFn: func(_ context.Context, o volume.CreateOptions) (volume.Volume, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.volumes[o.Name] = true
			return volume.Volume{Name: o.Name}, nil
		},
		VolumeRemoveFn: func(_ context.Context, name string, _ bool) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if !e.volumes[name] {
				return cerrdefs.ErrNotFound.WithMessage("no such volume")
			}
			delete(e.volumes, name)
			return nil
		},
		ContainerCreateFn: func(_ context.Context, cfg *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.find(name) != nil {
				return container.CreateResponse{}, cerrdefs.ErrConflict.WithMessage("name in use")
			}
			e.n++
			c := &poolCtr{id: fmt.Sprintf("id%d", e.n), name: name, cfg: cfg, state: container.StateCreated}
			e.byID[c.id] = c
			return container.CreateResponse{ID: c.id}, nil
		},
		ContainerStartFn: func(_ context.Context, id string, _ container.StartOptions) error {
			return e.set(id, container.StateRunning)
		},
		ContainerInspectFn: func(_ context.Context, ref string) (container.InspectResponse, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			c := e.find(ref)
			if c == nil {
				return container.InspectResponse{}, errNotFound
			}
			return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: c.id, Name: "/" + c.name,
				State: &container.State{Status: c.state, Running: c.state == container.StateRunning}}, Config: c.cfg}, nil
		},
		ContainerListFn: func(_ context.Context, o container.ListOptions) ([]container.Summary, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			var out []container.Summary
			for _, id := range slices.Sorted(maps.Keys(e.byID)) {
				c := e.byID[id]
				match := true
				for _, f := range o.Filters.Get("label") {
					k, v, exact := strings.Cut(f, "=")
					got, ok := c.cfg.Labels[k]
					if !ok || (exact && got != v) {
						match = false
					}
				}
				if match {
					out = append(out, container.Summary{ID: c.id, Names: []string{"/" + c.name}, Labels: c.cfg.Labels, State: c.state, Image: c.cfg.Image})
				}
			}
			return out, nil
		},
		ContainerRenameFn: func(_ context.Context, id, name string) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.find(name) != nil {
				return cerrdefs.ErrConflict.WithMessage("name in use")
			}
			c := e.byID[id]
			if c == nil {
				return errNotFound
			}
			e.renames = append(e.renames, c.name+"->"+name)
			c.name = name
			return nil
		},
		ContainerRemoveFn: func(_ context.Context, id string, _ container.RemoveOptions) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.byID[id] == nil {
				return errNotFound
			}
			delete(e.byID, id)
			return nil
		},
		ContainerStopFn: func(_ context.Context, id string, _ container.StopOptions) error {
			return e.set(id, container.StateExited)
		},
		NetworkInspectFn: func(context.Context, string, network.InspectOptions) (network.Inspect, error) {
			return network.Inspect{}, cerrdefs.ErrNotFound.WithMessage("no such network")
		},
	}
	return e
}

// find returns the container with id or name ref; e.mu is held.
func (e *poolEngine) find(ref string) *poolCtr {
	if c := e.byID[ref]; c != nil {
		return c
	}
	for _, c := range e.byID {
		if c.name == ref {
			return c
		}
	}
	return nil
}

func (e *poolEngine) set(id string, st container.ContainerState) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.byID[id]
	if c == nil {
		return errNotFound
	}
	c.state = st
	return nil
}

func (e *poolEngine) names() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, c := range e.byID {
		out = append(out, c.name)
	}
	slices.Sort(out)
	return out
}

// poolInput is a configuration sbx pools: workspace none, pool 1.
func poolInput(name string) sandbox.SpecInput {
	in := specInput()
	in.Name = name
	in.Config.Workspace = config.WorkspaceNone
	in.Config.Pool = 1
	return in
}

// filled is a manager on a fresh poolEngine whose pool of poolInput's config holds n.
func filled(t *testing.T, n int) (*poolEngine, *sandbox.Manager, []string) {
	t.Helper()
	e := newPoolEngine(t)
	m := fakeManager(t, e.FakeEngine)
	res, err := m.FillPool(context.Background(), poolInput(""), n)
	if err != nil || len(res.Created) != n || res.Ready != n {
		t.Fatalf("fill: %+v %v", res, err)
	}
	return e, m, res.Created
}

func TestPoolKeyLeavesPoolOutOfIdentity(t *testing.T) {
	a, b := poolInput("a"), poolInput("b")
	b.Config.Pool = 7
	_, ha, _ := a.Shape()
	_, hb, _ := b.Shape()
	ka, _ := sandbox.PoolKey(a)
	kb, _ := sandbox.PoolKey(b)
	if ha != hb || ka != kb {
		t.Errorf("pool changed the config hash (%s, %s) or the pool key (%s, %s); the name or the pool size must not", ha, hb, ka, kb)
	}
	for what, change := range map[string]func(*sandbox.SpecInput){
		"memory":      func(in *sandbox.SpecInput) { in.Config.Memory *= 2 },
		"version":     func(in *sandbox.SpecInput) { in.Version = "v2" },
		"extra label": func(in *sandbox.SpecInput) { in.ExtraLabels = map[string]string{"sbx.test": "r2"} },
		"project":     func(in *sandbox.SpecInput) { in.ProjectRoot = "/src/other" },
	} {
		c := poolInput("a")
		change(&c)
		if k, _ := sandbox.PoolKey(c); k == ka {
			t.Errorf("a change of %s kept the pool key", what)
		}
	}
}

func TestUnpoolable(t *testing.T) {
	for what, change := range map[string]func(*sandbox.SpecInput){
		"workspace ro": func(in *sandbox.SpecInput) { in.Config.Workspace = config.WorkspaceRO },
		"workspace rw": func(in *sandbox.SpecInput) { in.Config.Workspace = config.WorkspaceRW },
		"overlay":      func(in *sandbox.SpecInput) { in.Config.Workspace = config.WorkspaceOverlay },
		"egress":       func(in *sandbox.SpecInput) { in.Config.Egress = []string{"example.com"} },
		"binds": func(in *sandbox.SpecInput) {
			in.Config.Binds = []config.Bind{{Source: "/src/app/data", Target: "/data"}}
		},
		"caCerts": func(in *sandbox.SpecInput) { in.Config.CACerts = "host" },
		"ports":   func(in *sandbox.SpecInput) { in.Ports = []string{"9222/tcp"} },
		"create settings": func(in *sandbox.SpecInput) {
			in.CreateSettings = []config.Setting{{Key: "memory", Values: []string{"2g"}}}
		},
	} {
		in := poolInput("a")
		change(&in)
		if sandbox.Unpoolable(in) == "" {
			t.Errorf("%s: pooled", what)
		}
	}
	if why := sandbox.Unpoolable(poolInput("a")); why != "" {
		t.Errorf("workspace none: not pooled: %s", why)
	}
}

func TestPoolClaimRenamesAndRecords(t *testing.T) {
	e := newPoolEngine(t)
	m := fakeManager(t, e.FakeEngine)
	var refilled []string
	m.Refill = func(name string) { refilled = append(refilled, name) }
	ctx := context.Background()

	res, err := m.FillPool(ctx, poolInput(""), 2)
	if err != nil || len(res.Created) != 2 || res.Ready != 2 {
		t.Fatalf("fill: %+v %v", res, err)
	}
	pooled := res.Created
	// A pooled sandbox is no sandbox: not listed, not usable by its name.
	if list, _ := m.List(ctx); len(list) != 0 {
		t.Errorf("List shows pooled sandboxes: %v", list)
	}
	var pe *sandbox.PoolError
	if _, err := m.Inspect(ctx, pooled[0]); !errors.As(err, &pe) {
		t.Errorf("Inspect of pooled %s: %v, want a PoolError", pooled[0], err)
	}

	got, err := m.Ensure(ctx, poolInput("new"), sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Lease.Release()
	if !got.Pooled || !got.Created || got.Sandbox.Name != "new" || got.Sandbox.Key != pooled[0] || got.Sandbox.Status != "running" {
		t.Fatalf("Ensure: %+v %+v, want pooled %s claimed as new", got, got.Sandbox, pooled[0])
	}
	if !slices.Equal(e.renames, []string{"sbx-" + pooled[0] + "->sbx-new"}) || !slices.Equal(refilled, []string{"new"}) {
		t.Errorf("renames %v, refills %v", e.renames, refilled)
	}
	sb, err := m.Inspect(ctx, "new")
	if err != nil || sb.Key != pooled[0] || sb.WorkspaceVolume() != "sbx-"+pooled[0]+"-ws" || !sb.CreatedAt.Equal(clock) {
		t.Errorf("Inspect(new): %+v %v", sb, err)
	}
	list, _ := m.List(ctx)
	if len(list) != 1 || list[0].Name != "new" || list[0].Key != pooled[0] {
		t.Errorf("List: %v", list)
	}
	if left, _ := m.ListPool(ctx, ""); len(left) != 1 || left[0].Name != pooled[1] {
		t.Errorf("pool after the claim: %v", left)
	}
	if _, ok := m.State.LastUsed("new"); !ok {
		t.Error("the claim recorded no use, so maxRunning would not count it")
	}

	// Another config's sandbox is created, not claimed.
	other := poolInput("other")
	other.Config.Memory *= 2
	if got, err := m.Ensure(ctx, other, sandbox.EnsureOptions{}); err != nil || got.Pooled {
		t.Errorf("another config: %+v %v", got, err)
	}

	// Removing the claimed sandbox removes what its pool name names.
	if err := m.Remove(ctx, "new", true); err != nil {
		t.Fatal(err)
	}
	if e.volumes["sbx-"+pooled[0]+"-ws"] {
		t.Error("its volume is left")
	}
	if _, err := os.Stat(filepath.Join(m.State.Dir, "claimed", "new.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its claim record is left: %v", err)
	}
	removed, err := m.DrainPool(ctx, "")
	if err != nil || !slices.Equal(removed, []string{pooled[1]}) {
		t.Errorf("drain: %v %v", removed, err)
	}
	if n := e.names(); !slices.Equal(n, []string{"sbx-other"}) {
		t.Errorf("left after drain: %v", n)
	}
}

func TestInspectTrustsOnlyTheClaimRecord(t *testing.T) {
	e, m, created := filled(t, 1)
	ctx := context.Background()
	// Renamed behind sbx's back (docker rename): no record says it is "stolen".
	if err := e.ContainerRenameFn(ctx, "id1", "sbx-stolen"); err != nil {
		t.Fatal(err)
	}
	var nm *sandbox.NotManagedError
	if _, err := m.Inspect(ctx, "stolen"); !errors.As(err, &nm) {
		t.Errorf("renamed without a record: %v, want NotManagedError", err)
	}
	// A record naming another container does not make it one.
	if err := os.MkdirAll(filepath.Join(m.State.Dir, "claimed"), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf(`{"id":"id9","pooled":%q,"claimedAt":"2026-11-30T12:00:00Z"}`, created[0])
	if err := os.WriteFile(filepath.Join(m.State.Dir, "claimed", "stolen.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Inspect(ctx, "stolen"); !errors.As(err, &nm) {
		t.Errorf("record of another ID: %v, want NotManagedError", err)
	}
	if list, _ := m.List(ctx); len(list) != 0 {
		t.Errorf("List: %v", list)
	}
}

func TestFillPoolNeverEvicts(t *testing.T) {
	e := newPoolEngine(t)
	m := fakeManager(t, e.FakeEngine)
	ctx := context.Background()
	mine := poolInput("mine")
	mine.Config.Pool, mine.Config.MaxRunning = 0, 2
	if _, err := m.Ensure(ctx, mine, sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	in := poolInput("")
	in.Config.MaxRunning = 2
	res, err := m.FillPool(ctx, in, 3)
	if err != nil || len(res.Created) != 1 || !res.NoRoom {
		t.Fatalf("fill under maxRunning 2 beside one sandbox: %+v %v, want one pooled and no room", res, err)
	}
	if n := e.names(); !slices.Equal(n, []string{"sbx-mine", "sbx-" + res.Created[0]}) {
		t.Errorf("containers %v", n)
	}

	// A sandbox that needs room takes the pooled one's place, not a sandbox's.
	next := poolInput("next")
	next.Config.Pool, next.Config.MaxRunning = 0, 2
	if _, err := m.Ensure(ctx, next, sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := e.names(); !slices.Equal(n, []string{"sbx-mine", "sbx-next"}) {
		t.Errorf("containers %v, want the pooled one removed", n)
	}
	for _, n := range []string{"mine", "next"} {
		if sb, err := m.Inspect(ctx, n); err != nil || sb.Status != "running" {
			t.Errorf("%s: %+v %v", n, sb, err)
		}
	}
}

func TestFillPoolReplacesStale(t *testing.T) {
	e, m, created := filled(t, 1)
	ctx := context.Background()
	stale := created[0]
	_ = e.set("id1", container.StateExited) // stopped for idleness, say
	var refilled []string
	m.Refill = func(name string) { refilled = append(refilled, name) }
	// A stopped pooled sandbox is never claimed; the pool is refilled for the next one.
	if got, err := m.Ensure(ctx, poolInput("new"), sandbox.EnsureOptions{}); err != nil || got.Pooled {
		t.Errorf("claimed a stopped pooled sandbox: %+v %v", got, err)
	}
	if !slices.Equal(refilled, []string{"new"}) {
		t.Errorf("refills %v, want one after the pool had none ready", refilled)
	}
	res, err := m.FillPool(ctx, poolInput(""), 1)
	if err != nil || !slices.Equal(res.Removed, []string{stale}) || len(res.Created) != 1 || res.Ready != 1 {
		t.Errorf("refill: %+v %v, want %s removed and one created", res, err, stale)
	}
}

func TestFindOrphansKeepsWhatPooledSandboxesUse(t *testing.T) {
	e := newPoolEngine(t)
	e.VolumeListFn = func(context.Context, volume.ListOptions) (volume.ListResponse, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		var vs []*volume.Volume
		for name := range e.volumes {
			n := strings.TrimSuffix(strings.TrimPrefix(name, "sbx-"), "-ws")
			vs = append(vs, &volume.Volume{Name: name, Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: n}})
		}
		return volume.ListResponse{Volumes: vs}, nil
	}
	e.NetworkListFn = func(context.Context, network.ListOptions) ([]network.Summary, error) { return nil, nil }
	m := fakeManager(t, e.FakeEngine)
	ctx := context.Background()
	if _, err := m.FillPool(ctx, poolInput(""), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(ctx, poolInput("new"), sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o, err := m.FindOrphans(ctx, list, sandbox.Filter{})
	if err != nil || len(o.All()) != 0 {
		t.Errorf("orphans %v %v, want none: the claimed and the pooled sandbox use their volumes", o.All(), err)
	}
	// A pooled sandbox that stopped is no longer fresh: prune removes it.
	left, _ := m.ListPool(ctx, "")
	_ = e.set(left[0].ID, container.StateExited)
	o, err = m.FindOrphans(ctx, list, sandbox.Filter{})
	if err != nil || !slices.Equal(o.All(), []string{"pool/" + left[0].Name}) {
		t.Fatalf("orphans %v %v, want the stopped pooled sandbox alone", o.All(), err)
	}
	if err := m.RemoveOrphans(ctx, o); err != nil {
		t.Fatal(err)
	}
	if n := e.names(); !slices.Equal(n, []string{"sbx-new"}) {
		t.Errorf("containers after prune: %v", n)
	}
}

// A claimed sandbox recreated for another configuration cannot keep what is named after its
// pool name: it goes, workspace volume included, and the new sandbox is made under its name.
func TestRecreatingAClaimedSandbox(t *testing.T) {
	e, m, _ := filled(t, 1)
	ctx := context.Background()
	got, err := m.Ensure(ctx, poolInput("new"), sandbox.EnsureOptions{})
	if err != nil || !got.Pooled {
		t.Fatalf("claim: %+v %v", got, err)
	}
	key := got.Sandbox.Key
	changed := poolInput("new")
	changed.Config.Memory *= 2
	if got, err = m.Ensure(ctx, changed, sandbox.EnsureOptions{Replace: true}); err != nil || got.Pooled || !got.Created {
		t.Fatalf("replace: %+v %v", got, err)
	}
	if e.volumes[sandbox.VolumeName(key)] || !e.volumes[sandbox.VolumeName("new")] {
		t.Errorf("volumes %v: want %s gone and the new sandbox's own", e.volumes, sandbox.VolumeName(key))
	}
	if sb, err := m.Inspect(ctx, "new"); err != nil || sb.Key != "new" {
		t.Errorf("Inspect(new): %+v %v", sb, err)
	}
}

// Two sbx processes that both found no sandbox "new" claim one after the other (the pool
// lock orders them): the second takes nothing and leaves the first's record alone.
func TestSecondClaimOfOneName(t *testing.T) {
	_, m, _ := filled(t, 2)
	ctx := context.Background()
	first, err := m.ClaimPooled(ctx, poolInput("new"))
	if err != nil || first == nil {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	if second, err := m.ClaimPooled(ctx, poolInput("new")); err == nil || second != nil {
		t.Errorf("second claim: %+v %v, want none, and the error that sends Ensure to look again", second, err)
	}
	if sb, err := m.Inspect(ctx, "new"); err != nil || sb.ID != first.ID {
		t.Errorf("Inspect(new) after the second claim: %+v %v, want %s", sb, err, first.ID)
	}
	if left, _ := m.ListPool(ctx, ""); len(left) != 1 {
		t.Errorf("pool: %v, want the other one untouched", left)
	}
}
