package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// runOnHost runs the command of a container made with cfg and host on the host, each argument
// that names a mount's target replaced by its source, as the engine would run it inside:
// for a sandbox with the agent, sbx's binary serving the sandbox's agent directory.
func runOnHost(t *testing.T, cfg *container.Config, host *container.HostConfig) {
	t.Helper()
	argv := slices.Clone(cfg.Cmd)
	for i, a := range argv {
		for _, m := range host.Mounts {
			if a == m.Target {
				argv[i] = m.Source
			}
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%q: %s", argv, logs.String())
		}
	})
}

// A gVisor sandbox runs sbx's agent, which binds its socket itself (gVisor cannot accept on a
// listener made on the host): the container is made under runsc-sbx with the agent told so
// (agent.OwnSocket) and its directory mounted read-write, open to the sandbox user under a
// private parent; starting it empties that directory of what the sandbox left there and
// waits for the agent to answer, after which a command goes to the agent and the engine
// runs no exec. An agent that never answers costs the start agentWait, and commands go
// through the engine's exec. The fake engine's start runs the container's command on the
// host.
func TestCreateGVisorRunsTheAgent(t *testing.T) {
	bin := testenv.SbxBinary(t)
	for _, runs := range []bool{true, false} {
		t.Run(map[bool]string{true: "agent", false: "no agent"}[runs], func(t *testing.T) {
			fake := creatingEngine("c1")
			var cfg *container.Config
			var host *container.HostConfig
			fake.ContainerCreateFn = func(_ context.Context, c *container.Config, h *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
				cfg, host = c, h
				for _, m := range h.Mounts {
					if m.Target == sandbox.AgentMountPath {
						// What a previous run's sandbox could leave there: a link where the
						// socket goes, and a directory of its own.
						if err := os.Symlink("/", filepath.Join(m.Source, "agent.sock")); err != nil {
							t.Fatal(err)
						}
						if err := os.MkdirAll(filepath.Join(m.Source, "junk", "deeper"), 0o755); err != nil {
							t.Fatal(err)
						}
					}
				}
				return container.CreateResponse{ID: "c1"}, nil
			}
			fake.ContainerStartFn = func(context.Context, string, container.StartOptions) error {
				if runs {
					runOnHost(t, cfg, host)
				}
				return nil
			}
			fake.InfoFn = func(context.Context) (system.Info, error) {
				return system.Info{MemoryLimit: true, CPUCfsQuota: true, PidsLimit: true, Runtimes: map[string]system.RuntimeWithStatus{config.GVisorRuntime: {Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: sandbox.GVisorRuntimeArgs}}}}, nil
			}
			var execs atomic.Int32
			fake.ContainerExecCreateFn = func(context.Context, string, container.ExecOptions) (container.ExecCreateResponse, error) {
				execs.Add(1)
				return container.ExecCreateResponse{}, errNotFound
			}
			in := specInput()
			in.Config.Isolation = config.IsolationGVisor
			// The agent runs on the host here, whose cgroups hold none of a sandbox's limits
			// (under gVisor it reads no cgroup files at all).
			in.Config.Memory, in.Config.MemorySwap, in.Config.CPUs = 0, 0, 0
			m := fakeManager(t, fake)
			// A short path: the agent binds its socket by name, at most 107 bytes.
			state, err := os.MkdirTemp("", "sbx-gv-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(state) })
			m.State.Dir = state
			m.Agents, m.AgentBinary = true, bin
			var debug bytes.Buffer
			m.Debug = &debug
			if !runs {
				sandbox.SetAgentWait(t, 300*time.Millisecond)
			}
			res, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
			if err != nil {
				t.Fatal(err)
			}
			res.Lease.Release()

			if host.Runtime != config.GVisorRuntime || cfg.Labels[sandbox.LabelAgent] != agent.Version() ||
				!slices.Equal(cfg.Cmd, agent.Cmd(sandbox.AgentBinaryPath, sandbox.AgentMountPath, 0, "", true, "")) {
				t.Fatalf("runtime %q, agent label %q, cmd %q", host.Runtime, cfg.Labels[sandbox.LabelAgent], cfg.Cmd)
			}
			i := slices.IndexFunc(host.Mounts, func(m mount.Mount) bool { return m.Target == sandbox.AgentMountPath })
			if i < 0 || host.Mounts[i].ReadOnly {
				t.Fatalf("the agent directory's mount: %+v", host.Mounts)
			}
			dir := host.Mounts[i].Source
			for path, want := range map[string]os.FileMode{dir: 0o777, filepath.Dir(dir): 0o700} {
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
					t.Errorf("%s: %v %v, want mode %o", path, fi, err, want)
				}
			}
			var names []string
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				names = append(names, e.Name()+" "+e.Type().String())
			}
			if want := map[bool][]string{true: {"agent.sock S---------"}, false: nil}[runs]; !slices.Equal(names, want) {
				t.Errorf("the agent directory after the start holds %q, want %q", names, want)
			}

			var out bytes.Buffer
			r, err := m.Exec(context.Background(), res.Sandbox, sandbox.ExecOptions{Cmd: []string{"echo", "hi"}, Stdout: &out})
			if runs {
				if err != nil || r.ExitCode != 0 || out.String() != "hi\n" || execs.Load() != 0 || strings.Contains(debug.String(), "engine's exec") {
					t.Errorf("through the agent: %+v %v %q, %d execs; debug:\n%s", r, err, out.String(), execs.Load(), debug.String())
				}
				return
			}
			if execs.Load() != 1 || !strings.Contains(debug.String(), "its agent did not answer on its socket: no answer within 300ms") ||
				!strings.Contains(debug.String(), "command through the engine's exec") {
				t.Errorf("without an agent: %v, %d execs; debug:\n%s", err, execs.Load(), debug.String())
			}
		})
	}
}

// The gVisor fix names the engine's own file: the user's for rootless Docker; Podman is told
// it is not supported rather than given Docker's files.
func TestGVisorSetupNamesTheEnginesFile(t *testing.T) {
	for _, tc := range []struct {
		kind       engine.Kind
		want, lack string
	}{
		{engine.Kind{Product: engine.ProductDocker}, "to /etc/docker/daemon.json", "~/"},
		{engine.Kind{Product: engine.ProductDocker, Rootless: true}, "to ~/.config/docker/daemon.json", "/etc/docker"},
		{engine.Kind{Product: engine.ProductPodman}, "Docker only", "daemon.json"},
	} {
		if got := sandbox.GVisorSetup(tc.kind); !strings.Contains(got, tc.want) || strings.Contains(got, tc.lack) {
			t.Errorf("%s: %q, want %q and not %q", tc.kind, got, tc.want, tc.lack)
		}
	}
}
