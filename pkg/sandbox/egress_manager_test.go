package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

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
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) { return image.InspectResponse{}, nil },
		NetworkListFn: func(context.Context, network.ListOptions) ([]network.Summary, error) {
			// The engine's bridge and someone's network on the range's first /28.
			return []network.Summary{
				{Name: "bridge", IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: "172.17.0.0/16", Gateway: "172.17.0.1"}}}},
				{Name: "theirs", IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: "10.213.0.0/28"}}}},
			}, nil
		},
		NetworkCreateFn: func(_ context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error) {
			e.calls = append(e.calls, "network "+name)
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
			if strings.HasSuffix(id, "-proxy") {
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

func TestEnsureWithEgress(t *testing.T) {
	var m *sandbox.Manager
	e := newEgressEngine(t, func() string { return m.State.EgressDir("app-123456") })
	m = fakeManager(t, e.FakeEngine)
	in := specInput()
	in.Config.Egress = []string{"@debian"}
	if _, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"network sbx-app-123456-egress", "network sbx-app-123456-egress", "create sbx-app-123456-proxy",
		"connect sbx-app-123456-proxy bridge", "create sbx-app-123456", "start sbx-app-123456-proxy", "start sbx-app-123456"}
	if !slices.Equal(e.calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", e.calls, want)
	}
	n := e.networks["sbx-app-123456-egress"]
	if !n.Internal || n.Options["com.docker.network.bridge.inhibit_ipv4"] != "true" || n.IPAM.Config[0].Subnet != "10.213.0.32/28" ||
		n.Labels[sandbox.LabelManaged] != "true" || n.Labels[sandbox.LabelName] != "app-123456" {
		t.Errorf("egress network %+v: want internal, inhibit_ipv4, the first free /28, labelled", n)
	}
	proxy := e.containers["sbx-app-123456-proxy"]
	if proxy.Config.Labels[sandbox.LabelRole] != "egress-proxy" || proxy.Config.Labels[sandbox.LabelName] != "app-123456" ||
		!slices.Contains(proxy.Config.Cmd, "10.213.0.34:3128") || proxy.HostConfig.Mounts[1].Source != m.State.EgressDir("app-123456") {
		t.Errorf("proxy %+v %+v", proxy.Config, proxy.HostConfig.Mounts)
	}
	sb := e.containers["sbx-app-123456"]
	if string(sb.HostConfig.NetworkMode) != "sbx-app-123456-egress" || !slices.Contains(sb.Config.Env, "HTTPS_PROXY=http://10.213.0.34:3128") {
		t.Errorf("sandbox on %s with env %q", sb.HostConfig.NetworkMode, sb.Config.Env)
	}
	data, err := os.ReadFile(filepath.Join(m.State.EgressDir("app-123456"), "rules.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := egress.ParseFile(data)
	if err != nil || !slices.Equal(f.Allow, []string{"@debian"}) || !slices.Contains(f.Internal, "172.17.0.1") ||
		!slices.Contains(f.Internal, "10.213.0.32/28") || !slices.Contains(f.Internal, "10.213.0.0/16") {
		t.Errorf("rules file %+v, %v", f, err)
	}

	e.calls = nil
	if err := m.Stop(context.Background(), "app-123456"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"stop sbx-app-123456", "stop sbx-app-123456-proxy"}; !slices.Equal(e.calls, want) {
		t.Errorf("stop: %q, want %q", e.calls, want)
	}
	e.calls = nil
	if err := m.Remove(context.Background(), "app-123456", true); err != nil {
		t.Fatal(err)
	}
	if want := []string{"rm sbx-app-123456", "rm sbx-app-123456-proxy", "rm network sbx-app-123456-egress"}; !slices.Equal(e.calls, want) {
		t.Errorf("rm: %q, want %q", e.calls, want)
	}
	if _, err := os.Stat(m.State.EgressDir("app-123456")); !os.IsNotExist(err) {
		t.Errorf("egress directory left: %v", err)
	}
}

func TestChangeEgress(t *testing.T) {
	var m *sandbox.Manager
	e := newEgressEngine(t, func() string { return m.State.EgressDir("app-123456") })
	m = fakeManager(t, e.FakeEngine)
	in := specInput()
	in.Config.Egress = []string{"@debian"}
	ctx := context.Background()
	if _, err := m.Ensure(ctx, in, sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	// A stopped proxy reads the file when it starts: nothing to wait for (waitReload's test).
	if err := m.Stop(ctx, "app-123456"); err != nil {
		t.Fatal(err)
	}
	proxy := e.containers["sbx-app-123456-proxy"]
	proxy.State = &container.State{Status: container.StateExited}
	e.containers["sbx-app-123456-proxy"] = proxy
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
	var none *sandbox.NoEgressError
	if _, err := m.ChangeEgress(ctx, "plain-123456", true, []string{"pypi.org"}); !errors.As(err, &none) || errs.Hint(err) == "" {
		t.Errorf("a sandbox without egress: %v", err)
	}
}
