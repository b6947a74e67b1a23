package sandbox

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sbx-sandbox/sbx/pkg/config"
)

func safeConfig() config.Config {
	return config.Config{
		Mode: "all", Profile: "sandbox", Image: "sbx-sandbox:bookworm-slim", Workspace: "ro", Workdir: "/workspace",
		User: "1000:1000", ReadOnlyRoot: true,
		Tmpfs: []config.Tmpfs{
			{Path: "/tmp", Options: []string{"size=256m", "nosuid", "nodev", "noexec"}},
			{Path: "/var/tmp", Options: []string{"size=256m", "nosuid", "nodev", "noexec"}},
			{Path: "/run", Options: []string{"size=256m", "nosuid", "nodev", "noexec"}},
		},
		Network: "none", CapDrop: []string{"ALL"}, Init: true,
		Memory: 1 << 30, MemorySwap: 1 << 30, CPUs: 1, PidsLimit: 256,
		Ulimits: map[string]config.Ulimit{"nofile": {Soft: 4096, Hard: 4096}, "core": {}},
		Timeout: 10 * time.Minute, Env: map[string]string{"LANG": "C.UTF-8"},
	}
}

func buildTestSpec(t *testing.T, mutate func(*SpecInput)) *Spec {
	t.Helper()
	in := SpecInput{Name: "app-1a2b3c", ProjectRoot: "/home/u/app", Config: safeConfig(), Version: "v1", CreatedAt: time.Unix(1700000000, 0)}
	if mutate != nil {
		mutate(&in)
	}
	spec, err := BuildSpec(in)
	if err != nil {
		t.Fatalf("BuildSpec: %v", err)
	}
	return spec
}

func TestBuildSpecSecurityDefaults(t *testing.T) {
	s := buildTestSpec(t, nil)
	h, c := s.Host, s.Container
	if s.ContainerName != "sbx-app-1a2b3c" {
		t.Errorf("container name %q", s.ContainerName)
	}
	if !h.ReadonlyRootfs {
		t.Error("root filesystem is writable")
	}
	if !slices.Equal(h.CapDrop, []string{"ALL"}) || len(h.CapAdd) != 0 {
		t.Errorf("capabilities: drop %v add %v", h.CapDrop, h.CapAdd)
	}
	if !slices.Contains(h.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("no-new-privileges missing from %v", h.SecurityOpt)
	}
	for _, o := range h.SecurityOpt {
		if strings.Contains(o, "unconfined") {
			t.Errorf("security option %q", o)
		}
	}
	if h.Privileged || h.PidMode != "" || h.IpcMode != "" || h.UTSMode != "" || h.UsernsMode != "" || h.CgroupnsMode != "" {
		t.Errorf("a host namespace or privileged mode is set: %+v", h)
	}
	if h.MaskedPaths != nil || h.ReadonlyPaths != nil {
		t.Error("MaskedPaths/ReadonlyPaths set: an empty list would unmask /proc")
	}
	if len(h.Devices) != 0 || len(h.Sysctls) != 0 {
		t.Errorf("devices %v sysctls %v", h.Devices, h.Sysctls)
	}
	if h.NetworkMode != "none" {
		t.Errorf("network %q", h.NetworkMode)
	}
	if h.Init == nil || !*h.Init {
		t.Error("init is off")
	}
	if h.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Errorf("restart policy %q", h.RestartPolicy.Name)
	}
	if h.Memory != 1<<30 || h.MemorySwap != 1<<30 || h.NanoCPUs != 1e9 || h.PidsLimit == nil || *h.PidsLimit != 256 {
		t.Errorf("limits: mem %d swap %d cpus %d pids %v", h.Memory, h.MemorySwap, h.NanoCPUs, h.PidsLimit)
	}
	if len(h.Ulimits) != 2 || h.Ulimits[0].Name != "core" || h.Ulimits[0].Hard != 0 || h.Ulimits[1].Name != "nofile" || h.Ulimits[1].Soft != 4096 {
		t.Errorf("ulimits %+v %+v", h.Ulimits[0], h.Ulimits[1])
	}
	wantTmpfs := map[string]string{"/tmp": "size=256m,nosuid,nodev,noexec", "/var/tmp": "size=256m,nosuid,nodev,noexec", "/run": "size=256m,nosuid,nodev,noexec"}
	if !reflect.DeepEqual(h.Tmpfs, wantTmpfs) {
		t.Errorf("tmpfs %v", h.Tmpfs)
	}
	if c.User != "1000:1000" || c.WorkingDir != "/workspace" || !slices.Equal(c.Cmd, KeepAlive) {
		t.Errorf("user %q workdir %q cmd %v", c.User, c.WorkingDir, c.Cmd)
	}
	if !reflect.DeepEqual([]string(c.Env), []string{"LANG=C.UTF-8"}) {
		t.Errorf("env %v", c.Env)
	}
	for _, k := range []string{LabelManaged, LabelName, LabelProject, LabelConfigHash, LabelCreatedAt, LabelVersion} {
		if c.Labels[k] == "" {
			t.Errorf("label %s missing", k)
		}
	}
	if c.Labels[LabelManaged] != "true" || c.Labels[LabelProject] != "/home/u/app" || c.Labels[LabelCreatedAt] != "2023-11-14T22:13:20Z" {
		t.Errorf("labels %v", c.Labels)
	}
	want := []mount.Mount{{Type: mount.TypeBind, Source: "/home/u/app", Target: "/workspace", ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}}
	if !reflect.DeepEqual(h.Mounts, want) {
		t.Errorf("mounts %+v", h.Mounts)
	}
	if s.VolumeSpec() != nil {
		t.Error("ro workspace must not create a volume")
	}
}

func TestBuildSpecWorkspaceModes(t *testing.T) {
	rw := buildTestSpec(t, func(in *SpecInput) { in.Config.Workspace = "rw" })
	if rw.Host.Mounts[0].ReadOnly {
		t.Error("rw workspace mounted read-only")
	}
	none := buildTestSpec(t, func(in *SpecInput) {
		in.Config.Workspace = "none"
		in.ExtraLabels = map[string]string{"sbx.test": "r1"}
	})
	m := none.Host.Mounts[0]
	if m.Type != mount.TypeVolume || m.Source != "sbx-app-1a2b3c-ws" || m.Target != "/workspace" {
		t.Errorf("none workspace mount %+v", m)
	}
	vol := none.VolumeSpec()
	if vol == nil || vol.Name != "sbx-app-1a2b3c-ws" || vol.Labels[LabelManaged] != "true" || vol.Labels[LabelName] != "app-1a2b3c" || vol.Labels["sbx.test"] != "r1" {
		t.Errorf("volume spec %+v", vol)
	}
	if _, err := BuildSpec(SpecInput{Name: "x", ProjectRoot: "/p", Config: func() config.Config { c := safeConfig(); c.Workspace = "host"; return c }()}); err == nil {
		t.Error("unknown workspace mode accepted")
	}
}

func TestBuildSpecOptionalSettings(t *testing.T) {
	s := buildTestSpec(t, func(in *SpecInput) {
		in.Config.CapAdd = []string{"NET_BIND_SERVICE"}
		in.Config.SeccompProfile = "/p/seccomp.json"
		in.SeccompJSON = []byte(`{"defaultAction":"SCMP_ACT_ERRNO"}`)
		in.Config.ApparmorProfile = "sbx-custom"
		in.Config.Runtime = "runsc"
		in.Config.Binds = []config.Bind{{Source: "/home/u/app/data", Target: "/data", ReadOnly: true}}
		in.ImageVolumes = []string{"/var/lib/data", "/tmp"}
	})
	h := s.Host
	if !slices.Equal(h.CapAdd, []string{"NET_BIND_SERVICE"}) {
		t.Errorf("capAdd %v", h.CapAdd)
	}
	if !slices.Contains(h.SecurityOpt, `seccomp={"defaultAction":"SCMP_ACT_ERRNO"}`) || !slices.Contains(h.SecurityOpt, "apparmor=sbx-custom") {
		t.Errorf("security options %v", h.SecurityOpt)
	}
	if h.Runtime != "runsc" {
		t.Errorf("runtime %q", h.Runtime)
	}
	if len(h.Mounts) != 2 || h.Mounts[1].Source != "/home/u/app/data" || !h.Mounts[1].ReadOnly {
		t.Errorf("binds %+v", h.Mounts)
	}
	if h.Tmpfs["/var/lib/data"] != "size=64m,nosuid,nodev,noexec" || h.Tmpfs["/tmp"] != "size=256m,nosuid,nodev,noexec" {
		t.Errorf("image volumes must become tmpfs without overriding configured ones: %v", h.Tmpfs)
	}
	if _, err := BuildSpec(SpecInput{Name: "x", ProjectRoot: "/p", Config: func() config.Config { c := safeConfig(); c.SeccompProfile = "/x.json"; return c }()}); err == nil {
		t.Error("a seccomp profile without content was accepted")
	}
}

func TestConfigHash(t *testing.T) {
	a := buildTestSpec(t, nil)
	b := buildTestSpec(t, func(in *SpecInput) {
		in.CreatedAt = time.Now()
		in.Config.Timeout = time.Second
		in.Config.Mode = "off"
		in.Config.PassEnv = []string{"X"}
	})
	if a.Hash != b.Hash {
		t.Error("per-exec settings changed the config hash")
	}
	c := buildTestSpec(t, func(in *SpecInput) { in.Config.Memory = 2 << 30 })
	if a.Hash == c.Hash {
		t.Error("memory change kept the hash")
	}
	if got := ShapeDiff(a.Shape, c.Shape); !reflect.DeepEqual(got, []string{"memory"}) {
		t.Errorf("ShapeDiff = %v, want [memory]", got)
	}
	d := buildTestSpec(t, func(in *SpecInput) { in.ProjectRoot = "/home/u/other" })
	if got := ShapeDiff(a.Shape, d.Shape); !reflect.DeepEqual(got, []string{"project"}) {
		t.Errorf("ShapeDiff = %v, want [project]", got)
	}
}
