package engine

import (
	"strings"
	"testing"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/system"
)

func TestKindOf(t *testing.T) {
	docker := types.Version{Version: "20.10.24", Components: []types.ComponentVersion{{Name: "Engine"}, {Name: "containerd"}}}
	podman := types.Version{Version: "4.3.1", Components: []types.ComponentVersion{{Name: "Podman Engine", Version: "4.3.1"}}}
	for _, tc := range []struct {
		v    types.Version
		info system.Info
		want string
	}{
		{docker, system.Info{CgroupVersion: "2", SecurityOptions: []string{"name=seccomp,profile=builtin"}}, "rootful Docker 20.10.24 (cgroup v2)"},
		{docker, system.Info{CgroupVersion: "1", SecurityOptions: []string{"name=seccomp,profile=default", "name=rootless"}}, "rootless Docker 20.10.24 (cgroup v1)"},
		{podman, system.Info{SecurityOptions: []string{"name=seccomp,profile=/usr/share/containers/seccomp.json", "name=rootless"}}, "rootless Podman 4.3.1"},
		{podman, system.Info{CgroupVersion: "2"}, "rootful Podman 4.3.1 (cgroup v2)"},
	} {
		if got := KindOf(tc.v, tc.info).String(); got != tc.want {
			t.Errorf("KindOf(%v, %v) = %q, want %q", tc.v.Components, tc.info.SecurityOptions, got, tc.want)
		}
	}
}

func TestLimitsProblem(t *testing.T) {
	all := system.Info{MemoryLimit: true, CPUCfsQuota: true, PidsLimit: true}
	for _, tc := range []struct {
		kind Kind
		info system.Info
		want string
	}{
		{Kind{Product: ProductDocker, CgroupVersion: "1"}, all, ""},
		{Kind{Product: ProductDocker, Rootless: true, CgroupVersion: "2"}, all, ""},
		// Podman says it applies them on cgroup v1 rootless, and drops them.
		{Kind{Product: ProductPodman, Rootless: true, CgroupVersion: "1"}, all, "rootless Podman (cgroup v1) cannot apply memory, CPU or pids limits"},
		{Kind{Product: ProductDocker, Rootless: true, CgroupVersion: "1"}, all, "rootless Docker (cgroup v1) cannot apply"},
		{Kind{Product: ProductDocker, CgroupVersion: "2"}, system.Info{MemoryLimit: true}, "cannot apply CPU, pids limits"},
	} {
		got := LimitsProblem(tc.kind, tc.info)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("LimitsProblem(%v) = %q, want %q", tc.kind, got, tc.want)
		}
	}
}

func TestNormalizeImage(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/library/sbx-sandbox:bookworm-slim": "sbx-sandbox:bookworm-slim",
		"localhost/sbx-sandbox:bookworm-slim":         "sbx-sandbox:bookworm-slim",
		"sbx-sandbox:bookworm-slim":                   "sbx-sandbox:bookworm-slim",
		"docker.io/me/app:1":                          "docker.io/me/app:1",
		"ghcr.io/me/app:1":                            "ghcr.io/me/app:1",
	} {
		if got := NormalizeImage(in); got != want {
			t.Errorf("NormalizeImage(%q) = %q, want %q", in, got, want)
		}
	}
}
