package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

var rootlessV1 = system.Info{CgroupVersion: "1", MemoryLimit: true, CPUCfsQuota: true, PidsLimit: true,
	SecurityOptions: []string{"name=seccomp,profile=default", "name=rootless"}}

// An engine that says it cannot apply the limits is refused before anything is made, unless
// the user's own config accepts it; then the sandbox is made, with a warning.
func TestCreateRefusedWhereLimitsCannotHold(t *testing.T) {
	for _, accept := range []bool{false, true} {
		fake := creatingEngine("c1")
		created := false
		fake.ContainerCreateFn = func(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
			created = true
			return container.CreateResponse{ID: "c1"}, nil
		}
		fake.InfoFn = func(context.Context) (system.Info, error) { return rootlessV1, nil }
		m := fakeManager(t, fake)
		var warn bytes.Buffer
		m.Warn = &warn
		in := specInput()
		in.Config.DangerouslyAllowUnenforcedLimits = accept
		_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
		switch {
		case !accept && (err == nil || errs.ExitCode(err) != 125 || created ||
			!strings.Contains(err.Error(), "rootless Docker 20.10.24 (cgroup v1) cannot apply memory, CPU or pids limits") ||
			!strings.Contains(errs.Hint(err), "dangerouslyAllowUnenforcedLimits: true in your own config")):
			t.Errorf("want a refusal (125) before create: %v (hint %q), created %v", err, errs.Hint(err), created)
		case accept && (err != nil || !created || !strings.Contains(warn.String(), "runs without them")):
			t.Errorf("accepted: want the sandbox made with a warning: %v, created %v, warned %q", err, created, warn.String())
		}
	}
}

// An engine that drops a limit while saying it applies them (Podman on cgroup v1 rootless)
// is caught after create: the container is removed and the create fails naming the limit.
func TestCreateRefusedWhenTheEngineDroppedALimit(t *testing.T) {
	fake := creatingEngine("c1")
	var removed []string
	fake.ContainerRemoveFn = func(_ context.Context, id string, _ container.RemoveOptions) error {
		removed = append(removed, id)
		return nil
	}
	fake.ContainerInspectFn = func(_ context.Context, id string) (container.InspectResponse, error) {
		if id != "c1" {
			return container.InspectResponse{}, errNotFound
		}
		pids := int64(0)
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "c1",
			HostConfig: &container.HostConfig{Resources: container.Resources{PidsLimit: &pids}}}}, nil
	}
	m := fakeManager(t, fake)
	_, err := m.Ensure(context.Background(), specInput(), sandbox.EnsureOptions{})
	if err == nil || errs.ExitCode(err) != 125 || !strings.Contains(err.Error(), "did not apply the sandbox's limits: memory (asked") ||
		!strings.Contains(err.Error(), "pids (asked 256, the engine set 0)") || len(removed) != 1 || removed[0] != "c1" {
		t.Errorf("want a refusal naming the limits and the container removed: %v, removed %v", err, removed)
	}
}

// Podman reads a seccomp profile as a path: the profile goes to a file of its content, 0644,
// and an engine whose files are not this machine's is refused.
func TestPodmanGetsTheSeccompProfileAsAFile(t *testing.T) {
	for _, local := range []bool{true, false} {
		fake := creatingEngine("c1")
		var host *container.HostConfig
		fake.ContainerCreateFn = func(_ context.Context, _ *container.Config, h *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
			host = h
			return container.CreateResponse{ID: "c1"}, nil
		}
		fake.ServerVersionFn = func(context.Context) (types.Version, error) {
			return types.Version{Version: "4.3.1", Components: []types.ComponentVersion{{Name: "Podman Engine", Version: "4.3.1"}}}, nil
		}
		m := fakeManager(t, fake)
		m.HostPaths = local
		in := specInput()
		want, err := sandbox.BuildSpec(in)
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
		if !local {
			if err == nil || host != nil || !strings.Contains(err.Error(), "reads a seccomp profile from a file on its own machine") {
				t.Errorf("remote Podman: want a refusal before create: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var inline, path string
		for _, o := range want.Host.SecurityOpt {
			inline, _ = strings.CutPrefix(o, "seccomp=")
		}
		for _, o := range host.SecurityOpt {
			if p, ok := strings.CutPrefix(o, "seccomp="); ok {
				path = p
			}
		}
		b, err := os.ReadFile(path)
		st, serr := os.Stat(path)
		if !strings.HasPrefix(path, "/") || err != nil || string(b) != inline || serr != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("seccomp=%.80s: want a 0644 file holding the profile: %v %v", path, err, serr)
		}
	}
}

// What sbx cannot yet make hold on an engine is refused before anything is made: a rw or
// overlay workspace as a user a rootless engine does not map to itself.
func TestCreateRefusedWhatTheEngineCannotHold(t *testing.T) {
	podman := types.Version{Version: "4.3.1", Components: []types.ComponentVersion{{Name: "Podman Engine", Version: "4.3.1"}}}
	rootful := system.Info{CgroupVersion: "2", MemoryLimit: true, CPUCfsQuota: true, PidsLimit: true}
	rootless := rootful
	rootless.SecurityOptions = []string{"name=rootless"}
	for _, tc := range []struct {
		name      string
		v         types.Version
		info      system.Info
		workspace string
		egress    []string
		want      string
	}{
		{"rw on rootless Podman as another user", podman, rootless, "rw", nil, "is not the engine's user"},
		{"egress on rootful Podman", podman, rootful, "ro", []string{"deb.debian.org"}, "needs sbx's agent in the sandbox"},
		{"ro on rootless Docker", types.Version{Version: "20.10.24"}, rootless, "ro", nil, ""},
		{"rw on rootful Podman", podman, rootful, "rw", nil, ""},
	} {
		fake := creatingEngine("c1")
		created := false
		fake.ContainerCreateFn = func(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
			created = true
			return container.CreateResponse{ID: "c1"}, nil
		}
		fake.ServerVersionFn = func(context.Context) (types.Version, error) { return tc.v, nil }
		fake.InfoFn = func(context.Context) (system.Info, error) { return tc.info, nil }
		m := fakeManager(t, fake)
		m.HostPaths = true
		in := specInput()
		in.Config.Workspace, in.Config.Egress, in.ProjectRoot = tc.workspace, tc.egress, t.TempDir()
		_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
		if tc.want == "" {
			if !created {
				t.Errorf("%s: not created: %v", tc.name, err)
			}
			continue
		}
		if err == nil || errs.ExitCode(err) != 125 || !strings.Contains(err.Error(), tc.want) || errs.Hint(err) == "" || created {
			t.Errorf("%s: want a refusal (125) with a hint saying %q: %v", tc.name, tc.want, err)
		}
	}
}

// On a rootless engine a rw or overlay sandbox runs as the engine's user mapped to itself:
// Podman keeps the uid (keep-id), rootless Docker maps its root to the user, so the sandbox
// runs as 0 and its home belongs to 0; another user is refused, naming why.
func TestRootlessEnginesMapTheUserToItself(t *testing.T) {
	sandbox.SetProcessUser(t, 1001, 1002)
	podman := types.Version{Version: "4.3.1", Components: []types.ComponentVersion{{Name: "Podman Engine", Version: "4.3.1"}}}
	docker := types.Version{Version: "20.10.24"}
	rootless := system.Info{CgroupVersion: "2", MemoryLimit: true, CPUCfsQuota: true, PidsLimit: true, SecurityOptions: []string{"name=rootless"}}
	for _, tc := range []struct {
		name, workspace, user string
		v                     types.Version
		wantUser, wantUserns  string
		wantHome, refusal     string
	}{
		{"rw on rootless Docker", "rw", "1001:1002", docker, "0:0", "", "size=1g,uid=0,gid=0,mode=0755", ""},
		{"rw on rootless Podman", "rw", "1001:1002", podman, "1001:1002", "keep-id", "size=1g,uid=1001,gid=1002,mode=0755", ""},
		{"ro on rootless Docker", "ro", "1000:1000", docker, "1000:1000", "", "size=1g,uid=1000,gid=1000,mode=0755", ""},
		{"rw as another user on rootless Docker", "rw", "1234:1234", docker, "", "", "", "the sandbox's user 1234:1234 is not the engine's user (1001:1002, you)"},
		{"overlay as another user on rootless Podman", "overlay", "1000:1000", podman, "", "", "", "workspace overlay on rootless Podman 4.3.1 (cgroup v2): the sandbox's user 1000:1000 is not"},
	} {
		fake := creatingEngine("c1")
		var cfg *container.Config
		var host *container.HostConfig
		fake.ContainerCreateFn = func(_ context.Context, c *container.Config, h *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
			if !strings.HasSuffix(name, "-claim-overlay") {
				cfg, host = c, h
			}
			return container.CreateResponse{ID: "c1"}, nil
		}
		fake.ServerVersionFn = func(context.Context) (types.Version, error) { return tc.v, nil }
		fake.InfoFn = func(context.Context) (system.Info, error) { return rootless, nil }
		m := fakeManager(t, fake)
		m.HostPaths = true
		in := specInput()
		in.Config.Workspace, in.Config.User, in.ProjectRoot = tc.workspace, tc.user, t.TempDir()
		uid, gid, _ := strings.Cut(tc.user, ":")
		in.Config.Tmpfs = append(in.Config.Tmpfs, config.Tmpfs{Path: "/home/sandbox", Options: []string{"size=1g", "uid=" + uid, "gid=" + gid, "mode=0755"}})
		_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
		if tc.refusal != "" {
			if err == nil || errs.ExitCode(err) != 125 || !strings.Contains(err.Error(), tc.refusal) || errs.Hint(err) == "" || cfg != nil {
				t.Errorf("%s: want a refusal (125) with a hint saying %q: %v", tc.name, tc.refusal, err)
			}
			continue
		}
		if cfg == nil {
			t.Errorf("%s: not created: %v", tc.name, err)
			continue
		}
		if cfg.User != tc.wantUser || string(host.UsernsMode) != tc.wantUserns || host.Tmpfs["/home/sandbox"] != tc.wantHome {
			t.Errorf("%s: user %q userns %q home %q; want %q %q %q", tc.name, cfg.User, host.UsernsMode, host.Tmpfs["/home/sandbox"], tc.wantUser, tc.wantUserns, tc.wantHome)
		}
	}
}
