package sandbox_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
)

var clock = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func fakeManager(t *testing.T, fake *enginetest.FakeEngine) *sandbox.Manager {
	fake.T = t
	fake.Docker()
	return &sandbox.Manager{Engine: fake, State: &sandbox.StateStore{Dir: t.TempDir(), Now: func() time.Time { return clock }}, Now: func() time.Time { return clock }}
}

func specInput() sandbox.SpecInput {
	cfg := config.Defaults()
	cfg.Image = "sbx-sandbox:bookworm-slim"
	return sandbox.SpecInput{Name: "app-123456", ProjectRoot: "/src/app", Config: cfg}
}

func inspectOf(t *testing.T, in sandbox.SpecInput, status container.ContainerState) container.InspectResponse {
	t.Helper()
	in.CreatedAt = clock.Add(-time.Hour)
	spec, err := sandbox.BuildSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: "c1", State: &container.State{Status: status}},
		Config:            spec.Container,
	}
}

var errNotFound = cerrdefs.ErrNotFound.WithMessage("No such container")

// creatingEngine is a fake engine where no sandbox exists yet: creating one gives the
// container id, which starts.
func creatingEngine(id string) *enginetest.FakeEngine {
	return &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errNotFound
		},
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) { return image.InspectResponse{}, nil },
		ContainerCreateFn: func(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
			return container.CreateResponse{ID: id}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { return nil },
	}
}

func TestEnsureAdoptsAfterNameConflict(t *testing.T) {
	in := specInput()
	inspects := 0
	started := ""
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			inspects++
			if inspects == 1 {
				return container.InspectResponse{}, errNotFound
			}
			return inspectOf(t, in, container.StateCreated), nil // the winner has not started it yet
		},
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) { return image.InspectResponse{}, nil },
		ContainerCreateFn: func(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
			return container.CreateResponse{}, cerrdefs.ErrConflict.WithMessage("name in use")
		},
		ContainerStartFn: func(_ context.Context, id string, _ container.StartOptions) error { started = id; return nil },
	}
	res, err := fakeManager(t, fake).Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created || res.Sandbox.ID != "c1" || started != "c1" {
		t.Errorf("want the other caller's container adopted and started: %+v started %q", res, started)
	}
}

func TestEnsureRefusesForeignContainer(t *testing.T) {
	for name, labels := range map[string]map[string]string{
		"no labels": {},
		// docker run of a bundled image inherits the image's dev.sbx.managed label
		"inherited image labels": {sandbox.LabelManaged: "true", sandbox.LabelProfile: "sandbox"},
	} {
		t.Run(name, func(t *testing.T) {
			fake := &enginetest.FakeEngine{
				ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
					return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "x"}, Config: &container.Config{Labels: labels}}, nil
				},
			}
			_, err := fakeManager(t, fake).Ensure(context.Background(), specInput(), sandbox.EnsureOptions{})
			var nm *sandbox.NotManagedError
			if !errors.As(err, &nm) || errs.ExitCode(err) != errs.CodeFailure || errs.Hint(err) == "" {
				t.Fatalf("want NotManagedError with exit 125 and a hint, got %v", err)
			}
		})
	}
}

func TestEnsureMissingImage(t *testing.T) {
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errNotFound
		},
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) {
			return image.InspectResponse{}, cerrdefs.ErrNotFound.WithMessage("no such image")
		},
	}
	_, err := fakeManager(t, fake).Ensure(context.Background(), specInput(), sandbox.EnsureOptions{})
	if err == nil || !strings.Contains(err.Error(), "image sbx-sandbox:bookworm-slim not found") || !strings.Contains(errs.Hint(err), "sbx image build") {
		t.Fatalf("got %v (hint %q)", err, errs.Hint(err))
	}
}

func TestEnsureCreatesWithVolumeAndTmpfsForImageVolumes(t *testing.T) {
	in := specInput()
	in.Config.Workspace = "none"
	var gotVolume string
	var gotHost *container.HostConfig
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errNotFound
		},
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) {
			return image.InspectResponse{Config: &dockerspec.DockerOCIImageConfig{ImageConfig: ocispec.ImageConfig{Volumes: map[string]struct{}{"/data": {}}}}}, nil
		},
		VolumeCreateFn: func(_ context.Context, o volume.CreateOptions) (volume.Volume, error) {
			gotVolume = o.Name
			return volume.Volume{Name: o.Name}, nil
		},
		ContainerCreateFn: func(_ context.Context, _ *container.Config, h *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
			gotHost = h
			return container.CreateResponse{ID: "new"}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { return nil },
	}
	res, err := fakeManager(t, fake).Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err != nil || !res.Created {
		t.Fatalf("%+v %v", res, err)
	}
	if gotVolume != "sbx-app-123456-ws" || gotHost.Tmpfs["/data"] == "" {
		t.Errorf("volume %q tmpfs %v", gotVolume, gotHost.Tmpfs)
	}
}

// MustExist (sbx cp NAME:PATH) never creates a missing sandbox, but still recreates one it
// found idle with a changed configuration, as exec would.
func TestEnsureMustExist(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		fake := &enginetest.FakeEngine{ // no ContainerCreateFn: a create fails the test
			ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
				return container.InspectResponse{}, errNotFound
			},
		}
		_, err := fakeManager(t, fake).Ensure(context.Background(), specInput(), sandbox.EnsureOptions{MustExist: true, RecreateIfIdle: true})
		if !sandbox.IsNotFound(err) || errs.ExitCode(err) != errs.CodeError {
			t.Fatalf("got %v (exit %d)", err, errs.ExitCode(err))
		}
	})
	t.Run("idle with a changed configuration", func(t *testing.T) {
		p := newProject(t, "")
		sb := sandboxOf(t, p.resolve("web"))
		p.write("pidsLimit: 128\n")
		fake, created := driftEngine(t, sb, container.StateExited)
		m := fakeManager(t, fake)
		m.Resolver = p.rv
		res, err := m.Ensure(context.Background(), p.resolve("web"), sandbox.EnsureOptions{MustExist: true, RecreateIfIdle: true})
		if err != nil || !res.Created || res.Sandbox.ID != "new" || created.Labels[sandbox.LabelName] != "web" {
			t.Fatalf("%+v %v, want it recreated", res, err)
		}
	})
}

func TestEngineErrorsAreFailures(t *testing.T) {
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errors.New("Cannot connect to the Docker daemon")
		},
	}
	m := fakeManager(t, fake)
	_, err := m.Ensure(context.Background(), specInput(), sandbox.EnsureOptions{})
	if errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("engine failure: exit %d (%v)", errs.ExitCode(err), err)
	}
	if err := m.Remove(context.Background(), "x", true); errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("rm on a failing engine: %v", err)
	}
}

func TestRemoveNeedsForceWhenRunning(t *testing.T) {
	in := specInput()
	removed := false
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return inspectOf(t, in, container.StateRunning), nil
		},
		ContainerRemoveFn: func(context.Context, string, container.RemoveOptions) error { removed = true; return nil },
	}
	m := fakeManager(t, fake)
	if err := m.Remove(context.Background(), in.Name, false); err == nil || !strings.Contains(errs.Hint(err), "rm -f") {
		t.Fatalf("want a refusal naming -f: %v", err)
	}
	if removed {
		t.Fatal("removed without force")
	}
	if err := m.Remove(context.Background(), in.Name, true); err != nil || !removed {
		t.Fatalf("force: %v", err)
	}
}

func TestRemoveMissing(t *testing.T) {
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errNotFound
		},
	}
	err := fakeManager(t, fake).Remove(context.Background(), "ghost", true)
	if !sandbox.IsNotFound(err) || errs.ExitCode(err) != errs.CodeError {
		t.Fatalf("got %v (exit %d)", err, errs.ExitCode(err))
	}
}

// An image's labels are copied onto its containers, and an older sbx labelled the agent's
// directory: neither kind of label may make rm remove or change anything outside sbx's
// state directory, nor may a link planted where the agent's directory belongs.
func TestRemoveLeavesWhatLabelsName(t *testing.T) {
	for _, link := range []bool{false, true} {
		t.Run(map[bool]string{false: "label", true: "link in the state directory"}[link], func(t *testing.T) {
			in := specInput()
			victim := t.TempDir()
			file := filepath.Join(victim, "keep.txt")
			if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(victim, 0o750); err != nil {
				t.Fatal(err)
			}
			fake := &enginetest.FakeEngine{ContainerRemoveFn: func(context.Context, string, container.RemoveOptions) error { return nil }}
			m := fakeManager(t, fake)
			labelled := victim
			if link {
				labelled = filepath.Join(m.State.Dir, "agent", in.Name)
				if err := os.MkdirAll(filepath.Dir(labelled), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(victim, labelled); err != nil {
					t.Fatal(err)
				}
			}
			fake.ContainerInspectFn = func(context.Context, string) (container.InspectResponse, error) {
				info := inspectOf(t, in, container.StateRunning)
				info.Config.Labels[sandbox.LabelAgent] = agent.Version()
				info.Config.Labels["dev.sbx.agent-dir"] = labelled
				return info, nil
			}
			if err := m.State.Touch(in.Name); err != nil {
				t.Fatal(err)
			}
			err := m.Remove(context.Background(), in.Name, true)
			if link && (err == nil || !strings.Contains(err.Error(), "not inside sbx's state directory") || errs.Hint(err) == "") {
				t.Errorf("a link out of the state directory: want a refusal with a hint, got %v", err)
			}
			if !link && err != nil {
				t.Errorf("rm: %v", err)
			}
			if data, err := os.ReadFile(file); err != nil || string(data) != "keep" {
				t.Errorf("the directory a label names lost its file: %q %v", data, err)
			}
			if fi, err := os.Stat(victim); err != nil {
				t.Errorf("the directory a label names is gone: %v", err)
			} else if fi.Mode().Perm() != 0o750 {
				t.Errorf("the directory a label names changed mode to %v", fi.Mode().Perm())
			}
			if _, ok := m.State.LastUsed(in.Name); ok {
				t.Error("the state file is left")
			}
		})
	}
}

// A sandbox made by an older sbx carries the labels it wrote: the agent's directory, no
// create-settings label. rm still removes its agent directory, found by its name.
func TestRemoveSandboxOfAnOlderSbx(t *testing.T) {
	in := specInput()
	fake := &enginetest.FakeEngine{ContainerRemoveFn: func(context.Context, string, container.RemoveOptions) error { return nil }}
	m := fakeManager(t, fake)
	dir := filepath.Join(m.State.Dir, "agent", in.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil { // sealed, as an older sbx left it
		t.Fatal(err)
	}
	fake.ContainerInspectFn = func(context.Context, string) (container.InspectResponse, error) {
		info := inspectOf(t, in, container.StateExited)
		delete(info.Config.Labels, sandbox.LabelCreateSettings)
		info.Config.Labels[sandbox.LabelAgent] = "0123456789ab"
		info.Config.Labels["dev.sbx.agent-dir"] = dir
		return info, nil
	}
	if err := m.Remove(context.Background(), in.Name, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("its agent directory is left: %v", err)
	}
}

// The image's dev.sbx.* labels reach BuildSpec, which overrides them on the container.
func TestCreateOverridesImageLabels(t *testing.T) {
	var labels map[string]string
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errNotFound
		},
		ImageInspectFn: enginetest.ImageStore{"sbx-sandbox:bookworm-slim": enginetest.Image("sha256:1", 1, "", map[string]string{
			"dev.sbx.agent-dir": "/home/u", sandbox.LabelCreateSettings: `[{"Key":"network","Values":["host"]}]`,
		})}.Inspect,
		ContainerCreateFn: func(_ context.Context, cfg *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
			labels = cfg.Labels
			return container.CreateResponse{ID: "c1"}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { return nil },
	}
	res, err := fakeManager(t, fake).Ensure(context.Background(), specInput(), sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res.Lease.Release()
	for _, k := range []string{"dev.sbx.agent-dir", sandbox.LabelCreateSettings} {
		if v, ok := labels[k]; !ok || v != "" {
			t.Errorf("label %s: %q (set %v), want it set empty over the image's", k, v, ok)
		}
	}
}

// Prune's sweep removes only the leftovers of sandboxes sbx made: state files, agent
// directories, workspace volumes and networks of valid names whose sandbox is gone.
func TestFindOrphans(t *testing.T) {
	vol := func(name string, labels map[string]string) *volume.Volume {
		return &volume.Volume{Name: name, Labels: labels}
	}
	ours := func(name string) map[string]string {
		return map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: name}
	}
	fake := &enginetest.FakeEngine{VolumeListFn: func(context.Context, volume.ListOptions) (volume.ListResponse, error) {
		return volume.ListResponse{Volumes: []*volume.Volume{
			vol("sbx-gone-ws", ours("gone")),
			vol("sbx-live-ws", ours("live")),
			vol("precious", ours("gone")),
			vol("sbx-Bad-ws", ours("Bad")),
			vol("sbx-other-ws", map[string]string{sandbox.LabelName: "other"}),
		}}, nil
	}, NetworkListFn: func(context.Context, network.ListOptions) ([]network.Summary, error) {
		return []network.Summary{
			{Name: "sbx-gone-net", Labels: ours("gone")},
			{Name: "sbx-live-net", Labels: ours("live")},
			{Name: "mynet", Labels: ours("gone")},
			{Name: "sbx-x-net", Labels: map[string]string{sandbox.LabelName: "x"}},
			{Name: "sbx-gone-egress", Labels: ours("gone")},
			{Name: "sbx-live-egress", Labels: ours("live")},
		}, nil
	}, ContainerListFn: func(_ context.Context, opts container.ListOptions) ([]container.Summary, error) {
		if !opts.Filters.ExactMatch("label", sandbox.LabelRole+"=egress-proxy") {
			t.Errorf("proxies listed with filters %v", opts.Filters)
		}
		proxy := func(name string, labels map[string]string) container.Summary {
			labels[sandbox.LabelRole] = "egress-proxy"
			return container.Summary{Names: []string{"/" + name}, Labels: labels}
		}
		return []container.Summary{
			proxy("sbx_proxy-gone", ours("gone")),
			proxy("sbx_proxy-live", ours("live")),
			proxy("someone-elses", ours("gone")),
			proxy("sbx_proxy-y", map[string]string{sandbox.LabelName: "y"}),
		}, nil
	}}
	m := fakeManager(t, fake)
	for _, n := range []string{"gone", "live"} {
		if err := m.State.Touch(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(m.State.Dir, "Bad.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	agentDirs := filepath.Join(m.State.Dir, "agent")
	for _, d := range []string{"agent/gone", "agent/live", "agent/Bad", "ca/gone", "ca/live", "egress/gone", "egress/live"} {
		if err := os.MkdirAll(filepath.Join(m.State.Dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(agentDirs, "linked")); err != nil {
		t.Fatal(err)
	}
	o, err := m.FindOrphans(context.Background(), []*sandbox.Sandbox{{Name: "live"}}, sandbox.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.StateFiles, []string{"gone"}) || !slices.Equal(o.AgentDirs, []string{"gone"}) || !slices.Equal(o.CADirs, []string{"gone"}) ||
		!slices.Equal(o.EgressDirs, []string{"gone"}) || !slices.Equal(o.Proxies, []string{"sbx_proxy-gone"}) ||
		!slices.Equal(o.Volumes, []string{"sbx-gone-ws"}) || !slices.Equal(o.Networks, []string{"sbx-gone-net", "sbx-gone-egress"}) {
		t.Errorf("orphans %+v, want state file, agent, CA and egress directories, proxy, volume sbx-gone-ws and networks of gone", o)
	}
}

func TestSelectExpired(t *testing.T) {
	mk := func(name string, age time.Duration) *sandbox.Sandbox {
		return &sandbox.Sandbox{Name: name, CreatedAt: clock.Add(-age)}
	}
	list := []*sandbox.Sandbox{mk("fresh", time.Hour), mk("idle", 3*time.Hour), mk("ancient", 10*24*time.Hour), mk("nostate", 30*time.Hour), mk("keeper", 3*time.Hour)}
	last := map[string]time.Time{"fresh": clock.Add(-time.Minute), "idle": clock.Add(-26 * time.Hour), "ancient": clock, "keeper": clock.Add(-26 * time.Hour)}
	lookup := func(n string) (time.Time, bool) { t, ok := last[n]; return t, ok }
	rules := func(r sandbox.PruneRule) func(*sandbox.Sandbox) sandbox.PruneRule {
		return func(sb *sandbox.Sandbox) sandbox.PruneRule {
			if sb.Name == "keeper" && !r.All { // its own config keeps it two days
				return sandbox.PruneRule{Idle: 48 * time.Hour}
			}
			return r
		}
	}
	got, notOurs := sandbox.SelectExpired(list, lookup, clock, rules(sandbox.PruneRule{Idle: 24 * time.Hour, MaxAge: 7 * 24 * time.Hour}))
	var names []string
	for _, c := range got {
		names = append(names, c.Sandbox.Name+":"+c.Reason)
	}
	if want := "idle:idle 26h > 24h,ancient:age 10d > 7d"; strings.Join(names, ",") != want {
		t.Errorf("got %s\nwant %s", strings.Join(names, ","), want)
	}
	// Never used by this user: its 30 hours since creation say nothing about its use.
	if len(notOurs) != 1 || notOurs[0].Sandbox.Name != "nostate" {
		t.Errorf("not ours: %v", notOurs)
	}
	if got, _ := sandbox.SelectExpired(list, lookup, clock, rules(sandbox.PruneRule{})); len(got) != 0 {
		t.Errorf("disabled rules selected %d", len(got))
	}
	if got, _ := sandbox.SelectExpired(list, lookup, clock, rules(sandbox.PruneRule{All: true})); len(got) != 5 {
		t.Errorf("--all selected %d", len(got))
	}
}

func TestFilters(t *testing.T) {
	sb := &sandbox.Sandbox{Name: "web-1", Status: "running", Labels: map[string]string{sandbox.LabelProject: "/src/app"}}
	for _, tt := range []struct {
		filters []string
		want    bool
	}{
		{nil, true},
		{[]string{"name=web-*"}, true},
		{[]string{"name=db-*", "name=web-?"}, true},
		{[]string{"name=db-*"}, false},
		{[]string{"status=running", "project=/src/app"}, true},
		{[]string{"status=exited"}, false},
		{[]string{"project=/src/other"}, false},
	} {
		f, err := sandbox.ParseFilters(tt.filters)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Match(sb); got != tt.want {
			t.Errorf("%v: match %v, want %v", tt.filters, got, tt.want)
		}
	}
	for _, bad := range []string{"name", "color=red", "name=[", "status="} {
		if _, err := sandbox.ParseFilters([]string{bad}); errs.ExitCode(err) != errs.CodeUsage {
			t.Errorf("%q: want a usage error, got %v", bad, err)
		}
	}
}

func TestStateStore(t *testing.T) {
	s := &sandbox.StateStore{Dir: t.TempDir(), Now: func() time.Time { return clock }}
	if _, ok := s.LastUsed("a"); ok {
		t.Fatal("unknown sandbox has a last use")
	}
	if err := s.Touch("a"); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.LastUsed("a"); !ok || !got.Equal(clock) {
		t.Fatalf("LastUsed = %v %v", got, ok)
	}
	names, _ := s.Names()
	if strings.Join(names, ",") != "a" {
		t.Errorf("names %v (temp files must not show)", names)
	}
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("a"); err != nil {
		t.Errorf("removing twice: %v", err)
	}
	// A name from a label that is not a sandbox name never becomes a path.
	if err := os.WriteFile(filepath.Join(s.Dir, "Not-Valid.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"..", "../a", ""} {
		if err := s.Remove(bad); err == nil {
			t.Errorf("Remove(%q) was accepted", bad)
		}
	}
	if names, _ := s.Names(); len(names) != 0 {
		t.Errorf("names %v: a file that names no valid sandbox must not show", names)
	}
}

func TestEnsureRemovesWhatItCouldNotStart(t *testing.T) {
	removed := ""
	fake := creatingEngine("half")
	fake.ContainerStartFn = func(context.Context, string, container.StartOptions) error {
		return cerrdefs.ErrNotFound.WithMessage("network nosuchnet not found")
	}
	fake.ContainerRemoveFn = func(_ context.Context, id string, _ container.RemoveOptions) error { removed = id; return nil }
	_, err := fakeManager(t, fake).Ensure(context.Background(), specInput(), sandbox.EnsureOptions{})
	if err == nil || !strings.Contains(err.Error(), "network nosuchnet not found") || errs.ExitCode(err) != errs.CodeFailure {
		t.Fatalf("got %v", err)
	}
	if removed != "half" {
		t.Errorf("the container the engine would not start was left behind (removed %q)", removed)
	}
}

// An engine that cannot see sbx's agent directory (a socket forwarded from another machine)
// refuses its bind mount; the sandbox is made without the agent.
func TestCreateWithoutAgentWhenTheEngineCannotSeeItsDirectory(t *testing.T) {
	in := specInput()
	var creates []*container.Config
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errNotFound
		},
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) { return image.InspectResponse{}, nil },
		ContainerCreateFn: func(_ context.Context, cfg *container.Config, host *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
			creates = append(creates, cfg)
			for _, m := range host.Mounts {
				if m.Target == sandbox.AgentMountPath {
					return container.CreateResponse{}, cerrdefs.ErrInvalidArgument.WithMessage("invalid mount config for type \"bind\": bind source path does not exist: " + m.Source)
				}
			}
			return container.CreateResponse{ID: "c1"}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { return nil },
	}
	m := fakeManager(t, fake)
	m.Agents, m.AgentBinary = true, sandboxtest.StaticBinary(t)
	res, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res.Lease.Release()
	if len(creates) != 2 || creates[0].Labels[sandbox.LabelAgent] == "" {
		t.Fatalf("want a create with the agent, then one without: %d creates", len(creates))
	}
	if creates[1].Labels[sandbox.LabelAgent] != "" || !slices.Equal(creates[1].Cmd, sandbox.KeepAlive) || res.Sandbox.Labels[sandbox.LabelAgent] != "" {
		t.Errorf("the second create still has the agent: cmd %q labels %v", creates[1].Cmd, creates[1].Labels)
	}
	if _, err := os.Stat(filepath.Join(m.State.Dir, "agent", in.Name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the unused agent directory is left: %v", err)
	}
}

// An exec the engine refuses is explained by the engine's error class, or, for the process
// limit, which has none of its own, by engine.IsProcessLimit.
func TestExecRefusedByTheEngine(t *testing.T) {
	for _, tt := range []struct {
		name, want, wantHint string // no hint when wantHint is ""
		err                  error
	}{
		{"stopped", `sandbox "web" stopped before the command could start`, "sbx exec starts a stopped sandbox",
			cerrdefs.ErrConflict.WithMessage("Container c1 is not running")},
		{"paused", `sandbox "web" stopped before the command could start`, "sbx exec starts a stopped sandbox",
			cerrdefs.ErrConflict.WithMessage("Container c1 is paused, unpause the container before exec")},
		{"process limit", `sandbox "web" process limit reached`, "raise pidsLimit",
			cerrdefs.ErrInternal.WithMessage("OCI runtime exec failed: exec failed: unable to start container process: fork/exec /usr/bin/bash: resource temporarily unavailable: unknown")},
		{"other", `running a command in sandbox "web": No such container: c1`, "",
			cerrdefs.ErrNotFound.WithMessage("No such container: c1")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake := &enginetest.FakeEngine{T: t,
				ContainerExecCreateFn: func(context.Context, string, container.ExecOptions) (container.ExecCreateResponse, error) {
					return container.ExecCreateResponse{}, tt.err
				}}
			m := &sandbox.Manager{Engine: fake, Now: time.Now}
			sb := &sandbox.Sandbox{Name: "web", ID: "c1", Status: "running"}
			_, err := m.Exec(context.Background(), sb, sandbox.ExecOptions{Cmd: []string{"true"}})
			hint := errs.Hint(err)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, tt.err) || errs.ExitCode(err) != errs.CodeFailure ||
				!strings.Contains(hint, tt.wantHint) || (tt.wantHint == "") != (hint == "") {
				t.Errorf("err = %v (hint %q, exit %d), want %q with a hint naming %q, exit %d",
					err, hint, errs.ExitCode(err), tt.want, tt.wantHint, errs.CodeFailure)
			}
		})
	}
}

// With --debug, a command that goes through the engine's exec says why, in one line.
func TestDebugSaysWhyTheAgentIsNotUsed(t *testing.T) {
	for _, tt := range []struct {
		name, agent, user, want string
	}{
		{"no agent", "", "", `sandbox "app-123456" has no agent`},
		{"another version", "0123456789ab", "", `sandbox "app-123456" runs agent version 0123456789ab, this sbx speaks ` + agent.Version()},
		{"a user", agent.Version(), "root", "-u root: the agent runs commands only as the sandbox's user"},
		{"no answer", agent.Version(), "", `sandbox "app-123456": its agent did not answer: `},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stop := errors.New("no engine here")
			fake := &enginetest.FakeEngine{
				ContainerExecCreateFn: func(context.Context, string, container.ExecOptions) (container.ExecCreateResponse, error) {
					return container.ExecCreateResponse{}, stop
				},
				ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
					return inspectOf(t, specInput(), container.StateRunning), nil
				},
			}
			m := fakeManager(t, fake)
			var debug strings.Builder
			m.Debug = &debug
			sb := &sandbox.Sandbox{Name: "app-123456", ID: "c1", Status: "running", Labels: map[string]string{sandbox.LabelAgent: tt.agent}}
			_, err := m.Exec(context.Background(), sb, sandbox.ExecOptions{Cmd: []string{"true"}, User: tt.user})
			if !errors.Is(err, stop) {
				t.Fatalf("want the engine's exec tried, got %v", err)
			}
			if got := debug.String(); !strings.HasPrefix(got, "sbx: command through the engine's exec: "+tt.want) || strings.Count(got, "\n") != 1 {
				t.Errorf("debug output %q, want one line saying %q", got, tt.want)
			}
		})
	}
}

// driftEngine serves sb as the existing sandbox until it is removed, then records what is
// created in its place.
func driftEngine(t *testing.T, sb *sandbox.Sandbox, status container.ContainerState) (*enginetest.FakeEngine, *container.Config) {
	created := &container.Config{}
	removed := false
	return &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			if removed {
				return container.InspectResponse{}, errNotFound
			}
			return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: sb.ID, State: &container.State{Status: status}},
				Config: &container.Config{Labels: sb.Labels}}, nil
		},
		ContainerRemoveFn: func(context.Context, string, container.RemoveOptions) error { removed = true; return nil },
		ImageInspectFn:    func(context.Context, string) (image.InspectResponse, error) { return image.InspectResponse{}, nil },
		ContainerCreateFn: func(_ context.Context, c *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
			*created = *c
			return container.CreateResponse{ID: "new"}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { return nil },
	}, created
}

// exec (Ensure keeping a busy sandbox), create (Ensure refusing), ls (Drift alone) and
// explain (Drift with its own resolution) name the same keys for one drifted sandbox.
func TestDriftSameKeysForEveryCommand(t *testing.T) {
	p := newProject(t, "memory: 512m\n")
	sb := sandboxOf(t, p.resolve("web", flag("cpus", "1")))
	p.write("memory: 768m\nenv:\n  CHANGED: \"1\"\n")
	asked := p.resolve("web")
	want := []string{"env", "memory", "memorySwap"}

	ls, err := p.rv.Drift(sb, nil)
	if err != nil || !slices.Equal(ls.Keys, want) {
		t.Errorf("ls: %+v %v", ls, err)
	}
	explain, err := p.rv.Drift(sb, &asked)
	if err != nil || !slices.Equal(explain.Keys, want) {
		t.Errorf("explain: %+v %v", explain, err)
	}
	fake, _ := driftEngine(t, sb, container.StateRunning)
	m := fakeManager(t, fake)
	m.Resolver = p.rv
	if err := m.State.Touch("web"); err != nil { // busy: used just now
		t.Fatal(err)
	}
	res, err := m.Ensure(context.Background(), asked, sandbox.EnsureOptions{RecreateIfIdle: true})
	if err != nil || res.Created || !slices.Equal(res.Drift, want) {
		t.Errorf("exec: %+v %v", res, err)
	}
	_, err = m.Ensure(context.Background(), asked, sandbox.EnsureOptions{})
	var drift *sandbox.DriftError
	if !errors.As(err, &drift) || !slices.Equal(drift.Keys, want) || !strings.Contains(errs.Hint(err), "--replace") {
		t.Errorf("create: %v", err)
	}
}

// An idle sandbox that is not current is recreated from its own project and create flags,
// unless it runs and the caller keeps running ones (sbx cp).
func TestEnsureRecreatesAnIdleDriftedSandbox(t *testing.T) {
	p := newProject(t, "")
	sb := sandboxOf(t, p.resolve("web", flag("cpus", "1")))
	p.write("pidsLimit: 128\n")
	asked := p.resolve("web")

	fake, _ := driftEngine(t, sb, container.StateRunning)
	m := fakeManager(t, fake)
	m.Resolver = p.rv
	res, err := m.Ensure(context.Background(), asked, sandbox.EnsureOptions{RecreateIfIdle: true, KeepRunning: true})
	if err != nil || res.Created || !slices.Equal(res.Drift, []string{"pidsLimit"}) {
		t.Errorf("a running sandbox with KeepRunning: %+v %v, want it kept with the drift", res, err)
	}

	fake, created := driftEngine(t, sb, container.StateExited)
	m = fakeManager(t, fake)
	m.Resolver = p.rv
	res, err = m.Ensure(context.Background(), asked, sandbox.EnsureOptions{RecreateIfIdle: true, KeepRunning: true})
	if err != nil || !res.Created || len(res.Drift) != 0 {
		t.Fatalf("%+v %v, want it recreated", res, err)
	}
	if !strings.Contains(created.Labels[sandbox.LabelCreateSettings], `"cpus"`) {
		t.Errorf("recreated without its create flags: %q", created.Labels[sandbox.LabelCreateSettings])
	}
}

// A sandbox whose config cannot be resolved again is used as it is by exec, and refused by
// create, which cannot tell whether it would be ready.
func TestEnsureWhenDriftIsUnknown(t *testing.T) {
	p := newProject(t, "")
	sb := sandboxOf(t, p.resolve("web"))
	p.write("memory: 768m\n")
	asked := p.resolve("web")
	if err := os.RemoveAll(p.dir); err != nil {
		t.Fatal(err)
	}
	fake, _ := driftEngine(t, sb, container.StateRunning)
	m := fakeManager(t, fake)
	m.Resolver = p.rv
	res, err := m.Ensure(context.Background(), asked, sandbox.EnsureOptions{RecreateIfIdle: true})
	if err != nil || res.Created || len(res.Drift) != 0 {
		t.Errorf("exec: %+v %v, want it used as it is", res, err)
	}
	_, err = m.Ensure(context.Background(), asked, sandbox.EnsureOptions{})
	if err == nil || errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(err.Error(), "is current") {
		t.Errorf("create: %v (exit %d), want exit 125", err, errs.ExitCode(err))
	}
}

func TestRunning(t *testing.T) {
	for status, want := range map[container.ContainerState]string{
		container.StateRunning: "running", container.StatePaused: "running", container.StateExited: "not running (exited)",
	} {
		t.Run(string(status), func(t *testing.T) {
			current := status
			fake := &enginetest.FakeEngine{
				ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
					return inspectOf(t, specInput(), current), nil
				},
				ContainerUnpauseFn: func(context.Context, string) error { current = container.StateRunning; return nil },
			}
			sb, lease, err := fakeManager(t, fake).Running(context.Background(), specInput().Name, specInput().Config)
			defer lease.Release()
			var nr *sandbox.NotRunningError
			switch {
			case want == "running" && (err != nil || sb.Status != "running"):
				t.Errorf("%+v %v, want it running", sb, err)
			case want != "running" && (!errors.As(err, &nr) || !strings.Contains(err.Error(), want) || errs.ExitCode(err) != errs.CodeError):
				t.Errorf("%v, want %q with exit 1", err, want)
			}
		})
	}
	fake := &enginetest.FakeEngine{ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		return container.InspectResponse{}, errNotFound
	}}
	if _, _, err := fakeManager(t, fake).Running(context.Background(), "gone", config.Defaults()); !sandbox.IsNotFound(err) {
		t.Errorf("missing: %v", err)
	}
}

// egressEngine is an engine on which containers and networks exist once created; starting
// the proxy writes its ready file, as the proxy does once it listens. calls records the
// order of what was made, started and removed.
type egressEngine struct {
	*enginetest.FakeEngine
	containers map[string]container.InspectResponse
	networks   map[string]network.Inspect
	calls      []string
}

func newEgressEngine(t *testing.T, readyDir func() string) *egressEngine {
	e := &egressEngine{containers: map[string]container.InspectResponse{}, networks: map[string]network.Inspect{}}
	e.FakeEngine = &enginetest.FakeEngine{
		ImageInspectFn: func(_ context.Context, ref string) (image.InspectResponse, error) {
			if ref == sandbox.HelperImage { // as the engine has it once sbx imported it
				return image.InspectResponse{RootFS: image.RootFS{Layers: []string{sandbox.HelperLayerID()}}}, nil
			}
			return image.InspectResponse{}, nil
		},
		NetworkListFn: func(context.Context, network.ListOptions) ([]network.Summary, error) {
			// The engine's bridge and someone's network on the range's first /28.
			return []network.Summary{
				{Name: "bridge", IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: "172.17.0.0/16", Gateway: "172.17.0.1"}}}},
				{Name: "theirs", IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: "10.213.0.0/28"}}}},
			}, nil
		},
		NetworkCreateFn: func(_ context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error) {
			e.calls = append(e.calls, "network "+name)
			if opts.IPAM == nil { // the engine picks the subnet
				opts.IPAM = &network.IPAM{Config: []network.IPAMConfig{{Subnet: "172.18.0.0/16", Gateway: "172.18.0.1"}}}
			}
			if opts.IPAM.Config[0].Subnet == "10.213.0.16/28" { // taken by another sbx since the listing
				return network.CreateResponse{}, cerrdefs.ErrConflict.WithMessage("Pool overlaps with other one on this address space")
			}
			e.networks[name] = network.Inspect{ID: name, Name: name, Labels: opts.Labels, Internal: opts.Internal, Options: opts.Options, IPAM: *opts.IPAM}
			return network.CreateResponse{ID: name}, nil
		},
		NetworkInspectFn: func(_ context.Context, name string, _ network.InspectOptions) (network.Inspect, error) {
			if name == "bridge" {
				return network.Inspect{Name: "bridge", IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: "172.17.0.0/16", Gateway: "172.17.0.1"}}}}, nil
			}
			if n, ok := e.networks[name]; ok {
				return n, nil
			}
			return network.Inspect{}, cerrdefs.ErrNotFound
		},
		NetworkConnectFn: func(_ context.Context, net, id string, _ *network.EndpointSettings) error {
			e.calls = append(e.calls, "connect "+id+" "+net)
			return nil
		},
		NetworkRemoveFn: func(_ context.Context, id string) error {
			e.calls = append(e.calls, "rm network "+id)
			delete(e.networks, id)
			return nil
		},
		ContainerCreateFn: func(_ context.Context, cfg *container.Config, host *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
			e.calls = append(e.calls, "create "+name)
			e.containers[name] = container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: name, State: &container.State{Status: container.StateCreated}, HostConfig: host}, Config: cfg}
			return container.CreateResponse{ID: name}, nil
		},
		ContainerInspectFn: func(_ context.Context, name string) (container.InspectResponse, error) {
			if c, ok := e.containers[name]; ok {
				return c, nil
			}
			return container.InspectResponse{}, cerrdefs.ErrNotFound
		},
		ContainerStartFn: func(_ context.Context, id string, _ container.StartOptions) error {
			e.calls = append(e.calls, "start "+id)
			if strings.HasPrefix(id, "sbx_proxy-") {
				if err := os.WriteFile(filepath.Join(readyDir(), "ready"), nil, 0o644); err != nil {
					t.Error(err)
				}
			}
			c := e.containers[id]
			c.State = &container.State{Status: container.StateRunning, Running: true}
			e.containers[id] = c
			return nil
		},
		ContainerStopFn: func(_ context.Context, id string, _ container.StopOptions) error {
			e.calls = append(e.calls, "stop "+id)
			return nil
		},
		ContainerRemoveFn: func(_ context.Context, id string, _ container.RemoveOptions) error {
			e.calls = append(e.calls, "rm "+id)
			delete(e.containers, id)
			return nil
		},
	}
	return e
}

// ensureEgress makes sandbox app-123456 with egress: [@debian] on an egressEngine.
func ensureEgress(t *testing.T) (*sandbox.Manager, *egressEngine) {
	var m *sandbox.Manager
	e := newEgressEngine(t, func() string { return m.State.DirIn(sandbox.AreaEgress, "app-123456") })
	m = fakeManager(t, e.FakeEngine)
	in := specInput()
	in.Config.Egress = []string{"@debian"}
	if _, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	return m, e
}

func TestEnsureWithEgress(t *testing.T) {
	m, e := ensureEgress(t)
	want := []string{"network sbx-app-123456-egress", "network sbx-app-123456-egress", "network sbx-egress-out", "create sbx_proxy-app-123456",
		"connect sbx_proxy-app-123456 sbx-egress-out", "create sbx-app-123456", "start sbx_proxy-app-123456", "start sbx-app-123456"}
	if !slices.Equal(e.calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", e.calls, want)
	}
	n := e.networks["sbx-app-123456-egress"]
	if !n.Internal || n.Options["com.docker.network.bridge.inhibit_ipv4"] != "true" || n.IPAM.Config[0].Subnet != "10.213.0.32/28" ||
		n.Labels[sandbox.LabelManaged] != "true" || n.Labels[sandbox.LabelName] != "app-123456" {
		t.Errorf("egress network %+v: want internal, inhibit_ipv4, the first free /28, labelled", n)
	}
	proxy := e.containers["sbx_proxy-app-123456"]
	if proxy.Config.Labels[sandbox.LabelRole] != "egress-proxy" || proxy.Config.Labels[sandbox.LabelName] != "app-123456" ||
		!slices.Contains(proxy.Config.Cmd, "10.213.0.34:3128") || proxy.HostConfig.Mounts[1].VolumeOptions.DriverConfig.Options["device"] != m.State.DirIn(sandbox.AreaEgress, "app-123456") {
		t.Errorf("proxy %+v %+v", proxy.Config, proxy.HostConfig.Mounts)
	}
	sb := e.containers["sbx-app-123456"]
	if string(sb.HostConfig.NetworkMode) != "sbx-app-123456-egress" || !slices.Contains(sb.Config.Env, "HTTPS_PROXY=http://10.213.0.34:3128") {
		t.Errorf("sandbox on %s with env %q", sb.HostConfig.NetworkMode, sb.Config.Env)
	}
	data, err := os.ReadFile(filepath.Join(m.State.DirIn(sandbox.AreaEgress, "app-123456"), "rules", "rules.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := egress.ParseFile(data)
	if out := e.networks[sandbox.OutwardNetwork]; out.Internal || out.Options["com.docker.network.driver.mtu"] != "65520" || out.Labels[sandbox.LabelManaged] != "true" {
		t.Errorf("outward network %+v: want a bridge out, MTU 65520, labelled", out)
	}
	if err != nil || !slices.Equal(f.Allow, []string{"@debian"}) || !slices.Contains(f.Internal, "172.17.0.1") || !slices.Contains(f.Internal, "172.18.0.1") ||
		!slices.Contains(f.Internal, "10.213.0.32/28") || !slices.Contains(f.Internal, "10.213.0.0/16") {
		t.Errorf("rules file %+v, %v", f, err)
	}

	e.calls = nil
	if err := m.Stop(context.Background(), "app-123456"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"stop sbx-app-123456", "stop sbx_proxy-app-123456"}; !slices.Equal(e.calls, want) {
		t.Errorf("stop: %q, want %q", e.calls, want)
	}
	e.calls = nil
	if err := m.Remove(context.Background(), "app-123456", true); err != nil {
		t.Fatal(err)
	}
	if want := []string{"rm sbx-app-123456", "rm sbx_proxy-app-123456", "rm network sbx-app-123456-egress"}; !slices.Equal(e.calls, want) {
		t.Errorf("rm: %q, want %q", e.calls, want)
	}
	if _, err := os.Stat(m.State.DirIn(sandbox.AreaEgress, "app-123456")); !os.IsNotExist(err) {
		t.Errorf("egress directory left: %v", err)
	}
}

func TestChangeEgress(t *testing.T) {
	m, e := ensureEgress(t)
	ctx := context.Background()
	// A stopped proxy reads the file when it starts: nothing to wait for (waitReload's test).
	if err := m.Stop(ctx, "app-123456"); err != nil {
		t.Fatal(err)
	}
	proxy := e.containers["sbx_proxy-app-123456"]
	proxy.State = &container.State{Status: container.StateExited}
	e.containers["sbx_proxy-app-123456"] = proxy
	step := func(allow bool, dests []string, wantAllow, wantDeny string) {
		t.Helper()
		rt, err := m.ChangeEgress(ctx, "app-123456", allow, dests)
		if err != nil {
			t.Fatal(err)
		}
		f, err := m.State.ReadEgressRules("app-123456")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(f.Allow, " ") != "@debian"+wantAllow || strings.Join(f.Deny, " ") != wantDeny || !slices.Contains(f.Internal, "172.17.0.1") {
			t.Errorf("rules %+v, want allow @debian%s deny %q, internal kept", f, wantAllow, wantDeny)
		}
		if !slices.Equal(rt.Configured, []string{"@debian"}) || strings.Join(rt.Allowed, " ")+"|"+strings.Join(rt.Denied, " ") != strings.TrimSpace(wantAllow)+"|"+wantDeny {
			t.Errorf("runtime %+v", rt)
		}
	}
	step(true, []string{"registry.npmjs.org"}, " registry.npmjs.org", "")
	step(false, []string{"registry.npmjs.org"}, "", "registry.npmjs.org")
	step(true, []string{"registry.npmjs.org"}, " registry.npmjs.org", "")
	// A deny of what the config allows stays a deny entry: the config's list is kept as is.
	step(false, []string{"deb.debian.org"}, " registry.npmjs.org", "deb.debian.org")

	if _, err := m.ChangeEgress(ctx, "app-123456", true, []string{"*.com"}); errs.ExitCode(err) != errs.CodeUsage || errs.Hint(err) == "" {
		t.Errorf("a bad destination: %v (exit %d)", err, errs.ExitCode(err))
	}
	plain := specInput()
	plain.Name = "plain-123456"
	if _, err := m.Ensure(ctx, plain, sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ChangeEgress(ctx, "plain-123456", true, []string{"pypi.org"}); errs.ExitCode(err) != errs.CodeError || !strings.Contains(err.Error(), "has no egress rules") || errs.Hint(err) == "" {
		t.Errorf("a sandbox without egress: %v", err)
	}
}

// A gVisor sandbox on an engine without sbx's runsc registration (or with one that lacks a
// flag sbx needs, such as one registered before sbx's gVisor sandboxes got the agent) is
// refused before anything is made, with the daemon.json entry as the fix; with it, the
// sandbox is created under runsc-sbx (TestCreateGVisorRunsTheAgent).
func TestCreateGVisorChecksTheRuntime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		runtimes map[string]system.RuntimeWithStatus
		want     string
	}{
		{"none", map[string]system.RuntimeWithStatus{"runc": {}}, "the engine has no runtime named runsc-sbx"},
		{"flags missing", map[string]system.RuntimeWithStatus{"runsc-sbx": {Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: []string{"--platform=ptrace"}}}},
			"runsc-sbx runtime lacks --network=host --oci-seccomp --host-uds=create"},
		{"registered without the agent's flag", map[string]system.RuntimeWithStatus{"runsc-sbx": {Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: []string{"--platform=ptrace", "--network=host", "--oci-seccomp"}}}},
			"runsc-sbx runtime lacks --host-uds=create"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := creatingEngine("c1")
			var host *container.HostConfig
			fake.ContainerCreateFn = func(_ context.Context, _ *container.Config, h *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
				host = h
				return container.CreateResponse{ID: "c1"}, nil
			}
			fake.InfoFn = func(context.Context) (system.Info, error) { return system.Info{Runtimes: tc.runtimes}, nil }
			in := specInput()
			in.Config.Isolation = config.IsolationGVisor
			m := fakeManager(t, fake)
			m.Agents, m.AgentBinary = true, sandboxtest.StaticBinary(t)
			_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(errs.Hint(err), `"runsc-sbx": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=host", "--oci-seccomp", "--host-uds=create"]}`) || host != nil {
				t.Fatalf("got %v (hint %q), created: %v", err, errs.Hint(err), host != nil)
			}
		})
	}
}

// A network called sbx-egress-out that sbx did not make is never joined: a proxy on it could
// be reached by whatever else its maker put there.
func TestEgressRefusesAForeignOutwardNetwork(t *testing.T) {
	var m *sandbox.Manager
	e := newEgressEngine(t, func() string { return m.State.DirIn(sandbox.AreaEgress, "app-123456") })
	e.networks[sandbox.OutwardNetwork] = network.Inspect{Name: sandbox.OutwardNetwork, Labels: map[string]string{"someone": "else"}}
	m = fakeManager(t, e.FakeEngine)
	in := specInput()
	in.Config.Egress = []string{"@debian"}
	_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	var nm *sandbox.NotManagedError
	if !errors.As(err, &nm) || slices.Contains(e.calls, "connect sbx_proxy-app-123456 "+sandbox.OutwardNetwork) {
		t.Fatalf("err %v, calls %q: want the network refused and nothing connected to it", err, e.calls)
	}
}

// Inspect lists the host paths a sandbox may write to: what copies out of it guard.
func TestInspectListsWritableBinds(t *testing.T) {
	fake := &enginetest.FakeEngine{T: t, ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		return container.InspectResponse{
			ContainerJSONBase: &container.ContainerJSONBase{ID: "c1", State: &container.State{Status: container.StateRunning}},
			Config:            &container.Config{Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: "box"}},
			Mounts: []container.MountPoint{
				{Type: mount.TypeBind, Source: "/p", Destination: "/workspace", RW: true},
				{Type: mount.TypeBind, Source: "/p/.git/hooks", Destination: "/workspace/.git/hooks"},
				{Type: mount.TypeVolume, Source: "/var/lib/docker/volumes/v/_data", Destination: "/data", RW: true},
			},
		}, nil
	}}
	sb, err := (&sandbox.Manager{Engine: fake}).Inspect(context.Background(), "box")
	if err != nil || strings.Join(sb.WritableHostPaths, " ") != "/p" {
		t.Fatalf("%+v, %v", sb, err)
	}
}
