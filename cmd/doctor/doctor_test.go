package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/system"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func healthyInfo() system.Info {
	return system.Info{
		OSType: "linux", Architecture: "x86_64", OperatingSystem: "Debian", KernelVersion: "6.1",
		Driver: "overlay2", CgroupVersion: "2", CgroupDriver: "systemd",
		MemoryLimit: true, PidsLimit: true, CPUCfsQuota: true,
		SecurityOptions: []string{"name=seccomp,profile=builtin", "name=apparmor"},
		Runtimes:        map[string]system.RuntimeWithStatus{"runc": {}},
		DefaultRuntime:  "runc", InitBinary: "docker-init",
		RuncCommit: system.Commit{ID: "v1.1.12"},
	}
}

func statusOf(checks []Check, name string) Check {
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	return Check{}
}

// What the engine is changes what holds: a rootless engine on cgroup v1 applies no limits
// (Podman's info says it does), and Podman's --init is its own, with no InitBinary.
func TestInfoChecksByEngineKind(t *testing.T) {
	for _, tt := range []struct {
		name, check, want string
		kind              engine.Kind
		mutate            func(*system.Info)
	}{
		{"rootless Podman on cgroup v1", "cgroups", StatusFail, engine.Kind{Product: engine.ProductPodman, Rootless: true, CgroupVersion: "1"}, func(i *system.Info) { i.CgroupVersion = "1" }},
		{"rootless Docker on cgroup v1", "cgroups", StatusFail, engine.Kind{Product: engine.ProductDocker, Rootless: true, CgroupVersion: "1"}, func(i *system.Info) { i.CgroupVersion = "1" }},
		{"rootless Docker on cgroup v2", "cgroups", StatusOK, engine.Kind{Product: engine.ProductDocker, Rootless: true, CgroupVersion: "2"}, func(*system.Info) {}},
		{"Podman, which reports no init binary", "init", StatusOK, engine.Kind{Product: engine.ProductPodman}, func(i *system.Info) { i.InitBinary = "" }},
		{"Docker without one", "init", StatusFail, engine.Kind{Product: engine.ProductDocker}, func(i *system.Info) { i.InitBinary = "" }},
	} {
		info := healthyInfo()
		tt.mutate(&info)
		if c := statusOf(infoChecks(tt.kind, info), tt.check); c.Status != tt.want || (c.Status != StatusOK && c.Fix == "") {
			t.Errorf("%s: %s is %q, want %q, with a fix when not ok (%+v)", tt.name, tt.check, c.Status, tt.want, c)
		}
	}
}

func TestInfoChecks(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(*system.Info)
		check      string
		wantStatus string
	}{
		{"healthy seccomp", func(*system.Info) {}, "seccomp", StatusOK},
		{"no seccomp", func(i *system.Info) { i.SecurityOptions = []string{"name=apparmor"} }, "seccomp", StatusFail},
		{"no lsm", func(i *system.Info) { i.SecurityOptions = []string{"name=seccomp,profile=default"} }, "apparmor/selinux", StatusWarn},
		{"no pids limit", func(i *system.Info) { i.PidsLimit = false }, "cgroups", StatusFail},
		{"windows engine", func(i *system.Info) { i.OSType = "windows" }, "os/arch", StatusFail},
		{"vfs", func(i *system.Info) { i.Driver = "vfs" }, "storage driver", StatusWarn},
		{"no runc", func(i *system.Info) { i.Runtimes = map[string]system.RuntimeWithStatus{"crun": {}} }, "runtimes", StatusFail},
		{"no init", func(i *system.Info) { i.InitBinary = "" }, "init", StatusFail},
		{"runc version unknown", func(i *system.Info) { i.RuncCommit.ID = "N/A" }, "runc", StatusWarn},
		{"no gVisor runtime", func(*system.Info) {}, "gvisor", StatusWarn},
		{"gVisor registered without a flag sbx needs", func(i *system.Info) {
			i.Runtimes["runsc-sbx"] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: []string{"--platform=ptrace"}}}
		}, "gvisor", StatusWarn},
		{"gVisor registered by an earlier sbx, without the agent's flag", func(i *system.Info) {
			i.Runtimes["runsc-sbx"] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: []string{"--platform=ptrace", "--network=host", "--oci-seccomp"}}}
		}, "gvisor", StatusWarn},
		{"gVisor registered", func(i *system.Info) {
			i.Runtimes["runsc-sbx"] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: sandbox.GVisorRuntimeArgs}}
		}, "gvisor", StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := healthyInfo()
			tt.mutate(&info)
			c := statusOf(infoChecks(engine.Kind{Product: engine.ProductDocker, CgroupVersion: info.CgroupVersion}, info), tt.check)
			if c.Status != tt.wantStatus {
				t.Fatalf("%s: status %q, want %q (%+v)", tt.check, c.Status, tt.wantStatus, c)
			}
			if c.Status != StatusOK && c.Fix == "" {
				t.Errorf("%s: a failed check must carry a fix", tt.check)
			}
			if strings.Contains(tt.name, "without the agent's flag") && (!strings.Contains(c.Detail, "lacks --host-uds=create") || !strings.Contains(c.Fix, `"--host-uds=create"`)) {
				t.Errorf("the missing flag and the fix are not named: %+v", c)
			}
		})
	}
}

func TestDoctorRunEngineDown(t *testing.T) {
	ios, _, out, _ := iostreams.Test()
	opts := &DoctorOptions{IO: ios,
		Endpoint: func() (engine.Endpoint, error) {
			return engine.Endpoint{Host: "unix:///nope.sock", Source: "DOCKER_HOST"}, nil
		},
		Engine: func(context.Context) (engine.Engine, error) {
			return nil, engine.Unreachable(engine.Endpoint{Host: "unix:///nope.sock", Source: "DOCKER_HOST"}, errors.New("connection refused"))
		},
	}
	err := doctorRun(context.Background(), opts)
	if errs.ExitCode(err) != 1 {
		t.Fatalf("exit code %d, want 1 (err %v)", errs.ExitCode(err), err)
	}
	if !strings.Contains(out.String(), "✗ engine") || !strings.Contains(out.String(), "unix:///nope.sock") || !strings.Contains(out.String(), "fix: start Docker") {
		t.Errorf("output lacks the failed engine line with its fix:\n%s", out)
	}
}

func TestDoctorRunHealthyJSON(t *testing.T) {
	ios, _, out, _ := iostreams.Test()
	fake := &enginetest.FakeEngine{T: t,
		ServerVersionFn: func(context.Context) (types.Version, error) {
			return types.Version{Version: "28.0", APIVersion: "1.48"}, nil
		},
		InfoFn:         func(context.Context) (system.Info, error) { return healthyInfo(), nil },
		ImageInspectFn: noImages,
	}
	opts := &DoctorOptions{IO: ios, JSON: true,
		Endpoint: func() (engine.Endpoint, error) {
			return engine.Endpoint{Host: engine.DefaultHost, Source: "default"}, nil
		},
		Engine: func(context.Context) (engine.Engine, error) { return fake, nil },
	}
	if err := doctorRun(context.Background(), opts); err != nil {
		t.Fatalf("doctorRun: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), `"ok": true`) || !strings.Contains(out.String(), `"name": "seccomp"`) {
		t.Errorf("JSON report missing fields:\n%s", out)
	}
}

func TestAgentCheck(t *testing.T) {
	if c := agentCheck("unix:///var/run/docker.sock", true); c.Status != StatusOK || c.Required {
		t.Errorf("local engine: %+v", c)
	}
	c := agentCheck("tcp://10.0.0.5:2376", false)
	if c.Status != StatusWarn || c.Required || !strings.Contains(c.Detail, "tcp://10.0.0.5:2376") || c.Fix == "" {
		t.Errorf("remote engine: %+v", c)
	}
}
