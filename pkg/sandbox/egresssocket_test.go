package sandbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/system"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
)

// rootfulPodman makes e a rootful Podman 4.3.1 on cgroup v2.
func rootfulPodman(e *egressEngine) {
	e.ServerVersionFn = func(context.Context) (types.Version, error) {
		return types.Version{Version: "4.3.1", Components: []types.ComponentVersion{{Name: "Podman Engine", Version: "4.3.1"}}}, nil
	}
	e.InfoFn = func(context.Context) (system.Info, error) {
		return system.Info{CgroupVersion: "2", MemoryLimit: true, CPUCfsQuota: true, PidsLimit: true}, nil
	}
}

// On a rootful Podman a sandbox with egress has no network: its agent relays ProxyLoopback
// to the proxy's socket, the only thing of its egress directory it sees, and the proxy
// listens there, on the outward network alone. No egress network is made.
func TestRootfulPodmanEgressGoesThroughASocket(t *testing.T) {
	var m *sandbox.Manager
	e := newEgressEngine(t, func() string { return m.State.DirIn(sandbox.AreaEgress, "app-123456") })
	rootfulPodman(e)
	m = fakeManager(t, e.FakeEngine)
	m.HostPaths, m.Agents, m.AgentBinary = true, true, sandboxtest.StaticBinary(t)
	sandbox.SetAgentWait(t, 50*time.Millisecond) // the fake's start runs no agent
	in := specInput()
	in.Config.Egress = []string{"@debian"}
	if _, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range e.calls {
		if strings.HasPrefix(c, "network ") && c != "network "+sandbox.OutwardNetwork || strings.HasPrefix(c, "connect ") && !strings.HasSuffix(c, " "+sandbox.OutwardNetwork) {
			t.Errorf("%s: the sandbox needs no network", c)
		}
	}
	sb := e.containers[sandbox.ContainerName("app-123456")]
	if sb.HostConfig == nil || sb.HostConfig.NetworkMode != "none" {
		t.Fatalf("the sandbox's network: %+v", sb.HostConfig)
	}
	socketDir := m.State.DirIn(sandbox.AreaEgress, "app-123456") + "/socket"
	if !slices.ContainsFunc(sb.HostConfig.Mounts, func(mt mount.Mount) bool {
		return mt.Source == socketDir && mt.Target == sandbox.EgressSocketMountPath && mt.ReadOnly
	}) || slices.ContainsFunc(sb.HostConfig.Mounts, func(mt mount.Mount) bool { return mt.Source == m.State.DirIn(sandbox.AreaEgress, "app-123456") }) {
		t.Errorf("the sandbox sees %s read-only and nothing else of its egress directory: %+v", socketDir, sb.HostConfig.Mounts)
	}
	forward := agent.Forward + sandbox.ProxyLoopback + "=" + sandbox.EgressSocketMountPath + "/" + sandbox.ProxySocket
	if !slices.Contains(sb.Config.Cmd, forward) || !slices.Contains(sb.Config.Env, "HTTPS_PROXY=http://"+sandbox.ProxyLoopback) {
		t.Errorf("the agent relays and the tools are told: cmd %q, env %q", sb.Config.Cmd, sb.Config.Env)
	}
	proxy := e.containers[sandbox.ProxyName("app-123456")]
	if proxy.HostConfig == nil || proxy.HostConfig.NetworkMode != container.NetworkMode(sandbox.OutwardNetwork) ||
		!strings.Contains(strings.Join(proxy.Config.Cmd, " "), "--listen unix:/egress/socket/"+sandbox.ProxySocket) {
		t.Errorf("the proxy: network %v, cmd %q", proxy.HostConfig, proxy.Config.Cmd)
	}
}

// Without the agent nothing would relay to the socket: the create is refused, and a setup
// build, which runs the image's own programs, too.
func TestRootfulPodmanEgressNeedsTheAgent(t *testing.T) {
	var m *sandbox.Manager
	e := newEgressEngine(t, func() string { return m.State.DirIn(sandbox.AreaEgress, "app-123456") })
	rootfulPodman(e)
	m = fakeManager(t, e.FakeEngine)
	m.HostPaths = true
	in := specInput()
	in.Config.Egress = []string{"@debian"}
	_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err == nil || !strings.Contains(err.Error(), "needs sbx's agent in the sandbox") {
		t.Errorf("egress without the agent: %v", err)
	}
	if _, ok := e.containers[sandbox.ContainerName("app-123456")]; ok {
		t.Error("a sandbox was made")
	}
	in.Config.Egress, in.Config.Setup.Apt = nil, []string{"jq"}
	inspect := e.ImageInspectFn
	e.ImageInspectFn = func(ctx context.Context, ref string) (image.InspectResponse, error) {
		if strings.HasPrefix(ref, imagebuild.DerivedRepo+":") { // not built yet
			return image.InspectResponse{}, cerrdefs.ErrNotFound
		}
		return inspect(ctx, ref)
	}
	_, err = m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err == nil || errs.ExitCode(err) != 125 || !strings.Contains(err.Error(), "building its setup on rootful Podman") || errs.Hint(err) == "" {
		t.Errorf("setup: %v", err)
	}
}
