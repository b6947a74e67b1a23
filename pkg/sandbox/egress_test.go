package sandbox

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestBuildSpecEgress(t *testing.T) {
	subnet := netip.MustParsePrefix("10.213.0.16/28")
	s := buildTestSpec(t, func(in *SpecInput) {
		in.Config.Network, in.Config.Egress, in.EgressSubnet = "none", []string{"@debian"}, subnet
		in.Config.Env["no_proxy"] = "localhost,127.0.0.1,.internal"
	})
	if got := string(s.Host.NetworkMode); got != "sbx-app-1a2b3c-egress" {
		t.Errorf("network mode %q, want the egress network", got)
	}
	ep := s.Network.EndpointsConfig["sbx-app-1a2b3c-egress"]
	if ep == nil || ep.IPAMConfig == nil || ep.IPAMConfig.IPv4Address != "10.213.0.19" {
		t.Errorf("endpoint %+v, want the fixed address 10.213.0.19", ep)
	}
	for _, want := range []string{"HTTP_PROXY=http://10.213.0.18:3128", "HTTPS_PROXY=http://10.213.0.18:3128", "http_proxy=http://10.213.0.18:3128",
		"https_proxy=http://10.213.0.18:3128", "NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1,.internal"} {
		if !slices.Contains(s.Container.Env, want) {
			t.Errorf("no %s in %q", want, s.Container.Env)
		}
	}
	if strings.Contains(s.Shape, "10.213") {
		t.Errorf("the subnet shaped the sandbox: %s", s.Shape)
	}
	if _, err := BuildSpec(SpecInput{Name: "a", ProjectRoot: "/p", Config: egressConfig()}); err == nil {
		t.Error("egress without a subnet was built")
	}
}

func TestProxySpecHardening(t *testing.T) {
	cfg, host, net := ProxySpec(ProxyInput{Name: "web", Binary: "/usr/bin/sbx", Dir: "/state/egress/web",
		Subnet: netip.MustParsePrefix("10.213.0.0/28"), UID: 65534, GID: 65534, Labels: map[string]string{LabelName: "web", LabelManaged: "true"}})
	if cfg.User != "65534:65534" || cfg.Labels[LabelRole] != "egress-proxy" || cfg.Labels[LabelName] != "web" {
		t.Errorf("user %q labels %v", cfg.User, cfg.Labels)
	}
	if got := strings.Join(append(cfg.Entrypoint, cfg.Cmd...), " "); got != "/usr/local/libexec/sbx egress proxy --sandbox web --listen 10.213.0.2:3128 --rules /egress/rules/rules.json --log /egress/egress.log --ready /egress/ready" {
		t.Errorf("command %q", got)
	}
	if !host.ReadonlyRootfs || !slices.Equal(host.CapDrop, []string{"ALL"}) || !slices.Contains(host.SecurityOpt, "no-new-privileges:true") ||
		host.Init == nil || !*host.Init || host.PidsLimit == nil || *host.PidsLimit > 256 || host.Memory == 0 || host.Memory != host.MemorySwap ||
		host.Privileged || len(host.CapAdd) > 0 || host.LogConfig.Config["max-size"] == "" {
		t.Errorf("proxy not hardened: %+v", host)
	}
	if !slices.ContainsFunc(host.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, "seccomp={") }) {
		t.Error("no seccomp profile")
	}
	want := []mount.Mount{
		{Type: mount.TypeBind, Source: "/usr/bin/sbx", Target: "/usr/local/libexec/sbx", ReadOnly: true},
		{Type: mount.TypeVolume, Source: "/state/egress/web", Target: "/egress"},
		{Type: mount.TypeBind, Source: "/state/egress/web/rules", Target: "/egress/rules", ReadOnly: true},
	}
	if len(host.Mounts) != len(want) {
		t.Fatalf("mounts %+v", host.Mounts)
	}
	for i, m := range host.Mounts {
		if m.Type == mount.TypeVolume { // a host directory through the local driver, nosuid,nodev,noexec
			if o := m.VolumeOptions.DriverConfig.Options; o["o"] != "bind,nosuid,nodev,noexec" || o["type"] != "none" {
				t.Errorf("mount %d options %v", i, o)
			}
			m.Source = m.VolumeOptions.DriverConfig.Options["device"]
		}
		if m.Type != want[i].Type || m.Source != want[i].Source || m.Target != want[i].Target || m.ReadOnly != want[i].ReadOnly {
			t.Errorf("mount %d = %+v, want %+v", i, m, want[i])
		}
	}
	// Nothing of the sandbox's image: sbx's own, with no healthcheck and no inherited environment.
	if cfg.Image != HelperImage || cfg.Healthcheck == nil || !slices.Equal(cfg.Healthcheck.Test, []string{"NONE"}) || cfg.Env == nil || len(cfg.Env) != 0 {
		t.Errorf("the proxy must run on sbx's helper image with no healthcheck and no environment: image %q healthcheck %+v env %q", cfg.Image, cfg.Healthcheck, cfg.Env)
	}
	if string(host.NetworkMode) != "sbx-web-egress" || net.EndpointsConfig["sbx-web-egress"].IPAMConfig.IPv4Address != "10.213.0.2" {
		t.Errorf("network %s %+v", host.NetworkMode, net.EndpointsConfig)
	}
}

func TestPickSubnet(t *testing.T) {
	got, err := pickSubnet([]netip.Prefix{netip.MustParsePrefix("172.17.0.0/16"), netip.MustParsePrefix("10.213.0.0/28"), netip.MustParsePrefix("10.213.0.20/30")})
	if err != nil || got != netip.MustParsePrefix("10.213.0.32/28") {
		t.Errorf("pickSubnet = %v, %v; want 10.213.0.32/28, skipping the used and the overlapping", got, err)
	}
	_, err = pickSubnet([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	if err == nil || !strings.Contains(err.Error(), "all 4096 /28 subnets of 10.213.0.0/16 are in use") || errs.Hint(err) == "" {
		t.Errorf("exhausted: %v (hint %q)", err, errs.Hint(err))
	}
}

func egressConfig() config.Config {
	c := safeConfig()
	c.Egress = []string{"pypi.org"}
	return c
}

func TestWaitReload(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "egress.log")
	old := `{"time":"2026-12-01T10:00:00Z","event":"reload","rules":2}` + "\n"
	for _, tt := range []struct{ appended, want string }{
		{`{"time":"2026-12-01T10:00:01Z","event":"reload","rules":3}` + "\n", ""},
		{`{"time":"2026-12-01T10:00:01Z","event":"reload","error":"allow: egress rule \"@x\": unknown preset"}` + "\n", "refused the new rules and keeps the previous ones: allow: egress rule"},
	} {
		if err := os.WriteFile(log, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		mark := egress.MarkLog(log)
		if err := os.WriteFile(log, []byte(old+tt.appended), 0o644); err != nil {
			t.Fatal(err)
		}
		err := (&Manager{}).waitReload(context.Background(), "web", log, mark)
		if (tt.want == "" && err != nil) || (tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want))) {
			t.Errorf("after %q: %v, want %q", tt.appended, err, tt.want)
		}
	}
}

// A proxy that takes no new rules in time is reported with the end of its log.
func TestWaitReloadTimeoutShowsTheProxysLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "egress.log")
	if err := os.WriteFile(log, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fake := &enginetest.FakeEngine{ContainerLogsFn: func(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
		var b bytes.Buffer
		_, _ = stdcopy.NewStdWriter(&b, stdcopy.Stderr).Write([]byte("sbx: reading the rules: stuck\n"))
		return io.NopCloser(&b), nil
	}}
	err := (&Manager{Engine: fake}).waitReload(context.Background(), "web", log, egress.MarkLog(log))
	if err == nil || !strings.Contains(err.Error(), "did not take the new rules within 5s (the rules file is written); its log ends:\n  sbx: reading the rules: stuck") {
		t.Errorf("err %v: want the timeout with the proxy's log", err)
	}
}

// No sandbox's container can take its neighbour's proxy's name: a sandbox may be called
// "web-proxy" or "web.proxy" beside "web".
func TestProxyNameIsNoSandboxName(t *testing.T) {
	for _, n := range []string{"web", "web-proxy", "web.proxy", "proxy-web", "_proxy-web"} {
		for _, m := range []string{"web", "web-proxy", "web.proxy", "proxy-web"} {
			if ProxyName(n) == ContainerName(m) {
				t.Errorf("the proxy of %q is named as sandbox %q", n, m)
			}
		}
	}
}

// The helper image's layer is the same bytes every time, so its digest can be checked.
func TestHelperLayerIsStable(t *testing.T) {
	a, b := helperLayer(), helperLayer()
	if !bytes.Equal(a, b) || len(a) == 0 {
		t.Fatalf("helperLayer differs between calls (%d, %d bytes)", len(a), len(b))
	}
}

// An egress network avoids the subnets of the engine's networks and of its host's (another
// engine's bridge there, which the engine would not refuse).
func TestEgressNetworkAvoidsHostNetworks(t *testing.T) {
	var created string
	fake := &enginetest.FakeEngine{
		ServerVersionFn: func(context.Context) (types.Version, error) { return types.Version{Version: "28.0.0"}, nil },
		InfoFn:          func(context.Context) (system.Info, error) { return system.Info{}, nil },
		NetworkInspectFn: func(context.Context, string, network.InspectOptions) (network.Inspect, error) {
			return network.Inspect{}, cerrdefs.ErrNotFound
		},
		NetworkListFn: func(context.Context, network.ListOptions) ([]network.Summary, error) {
			return []network.Summary{{Name: "bridge", IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: "10.213.0.0/28"}}}}}, nil
		},
		NetworkCreateFn: func(_ context.Context, _ string, o network.CreateOptions) (network.CreateResponse, error) {
			created = o.IPAM.Config[0].Subnet
			return network.CreateResponse{}, nil
		},
	}
	m := &Manager{Engine: fake, HostNetworks: func() []netip.Prefix {
		return []netip.Prefix{netip.MustParsePrefix("10.213.0.16/28"), netip.MustParsePrefix("192.168.1.0/24")}
	}}
	got, err := m.ensureEgressNetwork(context.Background(), "web", nil)
	if err != nil || got != netip.MustParsePrefix("10.213.0.32/28") || created != "10.213.0.32/28" {
		t.Errorf("ensureEgressNetwork = %v, %v (created %q); want 10.213.0.32/28, past the engine's and the host's", got, err, created)
	}
}

// A proxy that exits before it listens is reported with the end of its log, read before a
// failed create removes it.
func TestProxyExitReportsItsLog(t *testing.T) {
	starts := 0
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{
				ContainerJSONBase: &container.ContainerJSONBase{ID: "p1", State: &container.State{Status: map[bool]string{false: "created", true: "exited"}[starts > 0], ExitCode: 2}},
				Config:            &container.Config{Labels: map[string]string{LabelRole: roleProxy, LabelName: "web"}},
			}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { starts++; return nil },
		ContainerLogsFn: func(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
			var b bytes.Buffer
			_, _ = stdcopy.NewStdWriter(&b, stdcopy.Stderr).Write([]byte("sbx: error: opening the egress log: permission denied\n"))
			return io.NopCloser(&b), nil
		},
	}
	m := &Manager{Engine: fake, State: &StateStore{Dir: t.TempDir()}}
	err := m.startProxy(context.Background(), "web")
	if err == nil || !strings.Contains(err.Error(), "exited (code 2) before it listened; its log ends:\n  sbx: error: opening the egress log: permission denied") ||
		strings.Contains(errs.Hint(err), "docker logs") || errs.Hint(err) == "" {
		t.Errorf("err %v, hint %q: want the proxy's log in the error, no hint to a container a failed create removes", err, errs.Hint(err))
	}
}
