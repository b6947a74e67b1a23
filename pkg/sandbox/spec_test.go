package sandbox

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/protect"
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
	in := SpecInput{Name: "app-1a2b3c", ProjectRoot: "/home/u/app", Config: safeConfig(), Version: "v1", CreatedAt: time.Unix(1700000000, 0),
		AgentBinary: "/usr/local/bin/sbx"}
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
	var seccomp string
	for _, o := range h.SecurityOpt {
		if p, ok := strings.CutPrefix(o, "seccomp="); ok {
			seccomp = p
		}
	}
	if !strings.Contains(seccomp, `"defaultAction":"SCMP_ACT_ERRNO"`) || strings.Contains(seccomp, "io_uring") {
		t.Errorf("the built-in seccomp profile must deny by default and leave io_uring out: %.200s", seccomp)
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
	if lc := h.LogConfig; lc.Type != "json-file" || lc.Config["max-size"] != "1m" || lc.Config["max-file"] != "1" {
		t.Errorf("log config %+v: the container log must be capped", lc)
	}
	if !strings.Contains(s.Shape, `"logs":"json-file max-size=1m"`) {
		t.Errorf("the log cap is not in the shape: %s", s.Shape)
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

// An image's labels are copied onto its containers. Every dev.sbx.* label must be sbx's
// own: set to its value, or emptied when sbx has none, so an image can never speak for it.
func TestBuildSpecOverridesImageLabels(t *testing.T) {
	forged := map[string]string{
		LabelManaged: "true", LabelName: "other", LabelProject: "/", LabelConfigHash: "x", LabelConfig: "{}",
		LabelCreatedAt: "2000-01-01T00:00:00Z", LabelVersion: "v0", LabelProfile: "browser", LabelWorkspace: "none",
		LabelCreateSettings: `[{"Key":"network","Values":["host"],"Source":{"Layer":"flag"}}]`,
		LabelAgent:          agent.Version(), imagebuild.LabelDockerfileHash: "x", LabelPool: "0123456789abcdef",
		"dev.sbx.agent-dir": "/home/u", "dev.sbx.future": "x", "org.example.title": "the image's own",
	}
	own := func(s *Spec) map[string]string {
		return map[string]string{
			LabelManaged: "true", LabelName: "app-1a2b3c", LabelProject: "/home/u/app", LabelConfigHash: s.Hash, LabelConfig: s.Shape,
			LabelCreatedAt: "2023-11-14T22:13:20Z", LabelVersion: "v1", LabelProfile: "sandbox", LabelWorkspace: "ro",
			LabelCreateSettings: "", LabelAgent: "", LabelToolbox: "", LabelPool: "",
		}
	}
	plain := buildTestSpec(t, nil)
	if want := own(plain); !reflect.DeepEqual(plain.Container.Labels, want) {
		t.Errorf("without image labels:\n got %v\nwant %v", plain.Container.Labels, want)
	}
	s := buildTestSpec(t, func(in *SpecInput) {
		in.ImageLabels = forged
		in.ExtraLabels = map[string]string{"sbx.test": "r1", "dev.sbx.agent-dir": "/extra"}
	})
	want := own(s)
	want[imagebuild.LabelDockerfileHash], want["dev.sbx.agent-dir"], want["dev.sbx.future"], want["sbx.test"] = "", "", "", "r1"
	if !reflect.DeepEqual(s.Container.Labels, want) {
		t.Errorf("over an image's labels:\n got %v\nwant %v", s.Container.Labels, want)
	}
	// sbx's own values still win when it has them.
	s = buildTestSpec(t, func(in *SpecInput) {
		in.ImageLabels = forged
		in.AgentDir = "/state/agent/app-1a2b3c"
		in.CreateSettings = []config.Setting{{Key: "memory", Values: []string{"2g"}, Source: config.Source{Layer: config.LayerFlag, Name: "--memory"}}}
	})
	if l := s.Container.Labels; l[LabelAgent] != agent.Version() || !strings.Contains(l[LabelCreateSettings], `"memory"`) || strings.Contains(l[LabelCreateSettings], "network") {
		t.Errorf("labels %v", l)
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

func TestBuildSpecPorts(t *testing.T) {
	if s := buildTestSpec(t, nil); s.Container.ExposedPorts != nil || s.Host.PortBindings != nil {
		t.Errorf("ports without asking: %v %v", s.Container.ExposedPorts, s.Host.PortBindings)
	}
	s := buildTestSpec(t, func(in *SpecInput) {
		in.Config.Network = "bridge"
		in.Ports = []string{"9222/tcp", "6080", "9222"}
	})
	if len(s.Container.ExposedPorts) != 2 || len(s.Host.PortBindings) != 2 {
		t.Fatalf("exposed %v bindings %v", s.Container.ExposedPorts, s.Host.PortBindings)
	}
	for _, p := range []string{"9222/tcp", "6080/tcp"} {
		if _, ok := s.Container.ExposedPorts[nat.Port(p)]; !ok {
			t.Errorf("%s not exposed", p)
		}
		b := s.Host.PortBindings[nat.Port(p)]
		if len(b) != 1 || b[0].HostIP != "127.0.0.1" || b[0].HostPort != "" {
			t.Errorf("%s bound as %+v, want only 127.0.0.1 with an engine-chosen port", p, b)
		}
	}
	if s.Host.PublishAllPorts {
		t.Error("PublishAllPorts would bind every exposed port on 0.0.0.0")
	}

	for _, tt := range []struct{ network, port, want string }{
		{"none", "9222/tcp", "cannot publish"},
		{"host", "9222/tcp", "cannot publish"},
		{"container:web", "9222/tcp", "cannot publish"},
		{"bridge", "0", "want a container port"},
		{"bridge", "70000/tcp", "want a container port"},
		{"bridge", "9222/icmp", "want a container port"},
		{"bridge", "9222-9223/tcp", "want a container port"},
		{"bridge", "127.0.0.1:9222:9222", "want a container port"},
	} {
		in := SpecInput{Name: "b", ProjectRoot: "/p", Config: safeConfig(), Ports: []string{tt.port}}
		in.Config.Network = tt.network
		if _, err := BuildSpec(in); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("network %s port %s: err %v, want %q", tt.network, tt.port, err, tt.want)
		}
	}
	in := SpecInput{Name: "b", ProjectRoot: "/p", Config: safeConfig(), Ports: []string{"9222/tcp"}}
	in.Config.Network = "sbx-net"
	if _, err := BuildSpec(in); err != nil {
		t.Errorf("a user-defined network: %v", err)
	}
}

func TestBuildSpecOneOffEnv(t *testing.T) {
	a := buildTestSpec(t, nil)
	b := buildTestSpec(t, func(in *SpecInput) {
		in.Config.Env = map[string]string{"LANG": "C.UTF-8", "SBX_VNC_PASSWORD": "from-config"}
		in.OneOffEnv = []string{"SBX_VNC_PASSWORD=s3cretPW"}
	})
	if !slices.Equal(b.Container.Env, []string{"LANG=C.UTF-8", "SBX_VNC_PASSWORD=s3cretPW"}) {
		t.Errorf("env %v: the one-off value must replace the config's", b.Container.Env)
	}
	c := buildTestSpec(t, func(in *SpecInput) { in.OneOffEnv = []string{"SBX_VNC_PASSWORD=other"} })
	if a.Hash != c.Hash || a.Shape != c.Shape {
		t.Error("a one-off variable changed the config hash")
	}
	for k, v := range c.Container.Labels {
		if strings.Contains(k+v, "other") || strings.Contains(k+v, "SBX_VNC_PASSWORD") {
			t.Errorf("label %s=%s carries the one-off variable", k, v)
		}
	}
	in := SpecInput{Name: "b", ProjectRoot: "/p", Config: safeConfig(), OneOffEnv: []string{"s3cretPW"}}
	if _, err := BuildSpec(in); err == nil || strings.Contains(err.Error(), "s3cretPW") {
		t.Errorf("malformed one-off variable: %v (it must be refused without showing its text)", err)
	}
}

func TestConfigHashPorts(t *testing.T) {
	bridge := func(ports ...string) func(*SpecInput) {
		return func(in *SpecInput) { in.Config.Network = "bridge"; in.Ports = ports }
	}
	none := buildTestSpec(t, bridge())
	cfg := safeConfig()
	cfg.Network = "bridge"
	shape, hash, err := ConfigShape(cfg, "/home/u/app")
	if err != nil || hash != none.Hash || shape != none.Shape {
		t.Errorf("without ports the hash must equal ConfigShape's (%v)", err)
	}
	a := buildTestSpec(t, bridge("9222/tcp", "6080/tcp"))
	b := buildTestSpec(t, bridge("6080", "9222/tcp"))
	c := buildTestSpec(t, bridge("9222/tcp"))
	if a.Hash != b.Hash {
		t.Error("the order or spelling of ports changed the hash")
	}
	if a.Hash == c.Hash || a.Hash == none.Hash {
		t.Error("published ports do not shape the hash")
	}
	if got := ShapeDiff(none.Shape, c.Shape); !reflect.DeepEqual(got, []string{"ports"}) {
		t.Errorf("ShapeDiff = %v, want [ports]", got)
	}
}

func BenchmarkBuildSpec(b *testing.B) {
	in := SpecInput{Name: "app-1a2b3c", ProjectRoot: "/home/u/app", Config: safeConfig(), Version: "v1", CreatedAt: time.Unix(1700000000, 0)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildSpec(in); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBuildSpecAgent(t *testing.T) {
	plain := buildTestSpec(t, nil)
	if !slices.Equal(plain.Container.Cmd, KeepAlive) || plain.Container.Labels[LabelAgent] != "" {
		t.Fatalf("no AgentDir, yet cmd %q labels %v", plain.Container.Cmd, plain.Container.Labels)
	}
	spec := buildTestSpec(t, func(in *SpecInput) { in.AgentDir = "/state/agent/app-1a2b3c" })
	if want := agent.Cmd(AgentBinaryPath, AgentMountPath, 0, "", false, ""); !slices.Equal(spec.Container.Cmd, want) {
		t.Errorf("cmd %q, want %q", spec.Container.Cmd, want)
	}
	if spec.Container.Labels[LabelAgent] != agent.Version() {
		t.Errorf("labels %v", spec.Container.Labels)
	}
	var found, bin bool
	for _, m := range spec.Host.Mounts {
		switch m.Target {
		case AgentMountPath:
			// Read-only: nothing in the sandbox may store data on the host's disk there.
			found = m.Source == "/state/agent/app-1a2b3c" && m.Type == "bind" && m.ReadOnly
		case AgentBinaryPath:
			// Read-only: the sandbox must not change the binary the host runs.
			bin = m.Source == "/usr/local/bin/sbx" && m.Type == "bind" && m.ReadOnly
		}
	}
	if !found || !bin {
		t.Errorf("no read-only bind of the agent directory at %s and of sbx at %s: %+v", AgentMountPath, AgentBinaryPath, spec.Host.Mounts)
	}
	if _, err := BuildSpec(SpecInput{Name: "app-1a2b3c", Config: safeConfig(), AgentDir: "/state/agent/app"}); err == nil {
		t.Error("an agent directory without a binary to run")
	}
	if spec.Hash != plain.Hash {
		t.Error("the agent changed the config hash: sandboxes made before it would count as changed")
	}
}

func TestBuildSpecProtectedPaths(t *testing.T) {
	// Given children first: BuildSpec puts parents first.
	protected := []protect.Mount{
		{Path: ".git/hooks", ReadOnly: true, Reason: "protectedPaths entry .git/hooks", Create: protect.CreateDir},
		{Path: "a/b/.git/config", ReadOnly: true},
		{Path: "a/b/.git", Reason: "pinned"},
		{Path: ".sbx.yaml", ReadOnly: true},
		{Path: "a/b"}, {Path: "a"}, {Path: ".git"},
	}
	s := buildTestSpec(t, func(in *SpecInput) {
		in.Config.Workspace = "rw"
		in.Protected = protected
		in.AgentDir = "/state/agent/app"
		in.Config.Binds = []config.Bind{{Source: "/home/u/app/data", Target: "/data"}}
	})
	rprivate := &mount.BindOptions{Propagation: mount.PropagationRPrivate}
	bind := func(rel string, ro bool) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: "/home/u/app/" + rel, Target: "/workspace/" + rel, ReadOnly: ro, BindOptions: rprivate}
	}
	want := []mount.Mount{
		{Type: mount.TypeBind, Source: "/home/u/app", Target: "/workspace", BindOptions: rprivate},
		bind(".git", false), bind(".sbx.yaml", true), bind("a", false),
		bind(".git/hooks", true), bind("a/b", false),
		bind("a/b/.git", false),
		bind("a/b/.git/config", true),
		{Type: mount.TypeBind, Source: "/state/agent/app", Target: AgentMountPath, ReadOnly: true, BindOptions: rprivate},
		{Type: mount.TypeBind, Source: "/usr/local/bin/sbx", Target: AgentBinaryPath, ReadOnly: true, BindOptions: rprivate},
		{Type: mount.TypeBind, Source: "/home/u/app/data", Target: "/data", BindOptions: rprivate},
	}
	if !reflect.DeepEqual(s.Host.Mounts, want) {
		t.Errorf("mounts\n got  %+v\n want %+v", s.Host.Mounts, want)
	}
	if protected[0].Path != ".git/hooks" {
		t.Error("BuildSpec reordered its input")
	}

	// Only rw mounts them.
	for _, mode := range []string{"ro", "none"} {
		s := buildTestSpec(t, func(in *SpecInput) { in.Config.Workspace = mode; in.Protected = protected })
		if len(s.Host.Mounts) != 1 {
			t.Errorf("workspace %s: mounts %+v", mode, s.Host.Mounts)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "/etc", "a/../../x", "a/"} {
		in := SpecInput{Name: "x", ProjectRoot: "/p", Config: safeConfig(), Protected: []protect.Mount{{Path: bad, ReadOnly: true}}}
		in.Config.Workspace = "rw"
		if _, err := BuildSpec(in); err == nil || !strings.Contains(err.Error(), "not a clean path") {
			t.Errorf("protected path %q: %v", bad, err)
		}
	}
	in := SpecInput{Name: "x", ProjectRoot: "/p", Config: safeConfig(), Protected: []protect.Mount{{Path: ".git"}, {Path: ".git", ReadOnly: true}}}
	in.Config.Workspace = "rw"
	if _, err := BuildSpec(in); err == nil || !strings.Contains(err.Error(), "mounted twice") {
		t.Errorf("a path mounted twice: %v", err)
	}
}

func TestConfigHashProtectedPaths(t *testing.T) {
	// ro and none sandboxes keep their hash: the key is not in their shape at all.
	for _, mode := range []string{"ro", "none"} {
		a := buildTestSpec(t, func(in *SpecInput) { in.Config.Workspace = mode })
		b := buildTestSpec(t, func(in *SpecInput) {
			in.Config.Workspace = mode
			in.Config.ProtectedPaths = []string{".git/hooks", ".vscode"}
		})
		if a.Hash != b.Hash || strings.Contains(a.Shape, "protectedPaths") {
			t.Errorf("workspace %s: protectedPaths shaped the sandbox: %s", mode, b.Shape)
		}
	}
	rw := func(paths []string, protected ...protect.Mount) *Spec {
		return buildTestSpec(t, func(in *SpecInput) {
			in.Config.Workspace = "rw"
			in.Config.ProtectedPaths = paths
			in.Protected = protected
		})
	}
	a := rw([]string{".git/hooks", ".vscode"})
	if !strings.Contains(a.Shape, `"protectedPaths":[".git/hooks",".vscode"]`) {
		t.Errorf("rw shape without protectedPaths: %s", a.Shape)
	}
	if b := rw([]string{".vscode", ".git/hooks", ".vscode"}); b.Hash != a.Hash {
		t.Error("the order or a repeat of protectedPaths changed the hash")
	}
	// What the tree held at create is not configuration: it does not change the hash.
	if b := rw([]string{".git/hooks", ".vscode"}, protect.Mount{Path: ".vscode", ReadOnly: true}); b.Hash != a.Hash {
		t.Error("the computed mounts changed the hash")
	}
	b := rw([]string{".git/hooks"})
	if got := ShapeDiff(a.Shape, b.Shape); !reflect.DeepEqual(got, []string{"protectedPaths"}) {
		t.Errorf("ShapeDiff = %v, want [protectedPaths]", got)
	}
	if empty, none := rw([]string{}), rw(nil); empty.Hash != none.Hash {
		t.Error("an empty list and no list differ")
	}
}

// A seccomp profile kept in a file shapes the sandbox by its content, not only its path: an
// edit of the file is a change that names seccompProfile.
func TestConfigHashSeccompContent(t *testing.T) {
	profile := func(content string) func(*SpecInput) {
		return func(in *SpecInput) {
			in.Config.SeccompProfile = "/home/u/app/seccomp.json"
			in.SeccompJSON = []byte(content)
		}
	}
	a := buildTestSpec(t, profile(`{"defaultAction":"SCMP_ACT_ERRNO"}`))
	b := buildTestSpec(t, profile(`{"defaultAction":"SCMP_ACT_ERRNO"}`))
	c := buildTestSpec(t, profile(`{"defaultAction":"SCMP_ACT_ALLOW"}`))
	if a.Hash != b.Hash {
		t.Error("the same profile gave another hash")
	}
	if a.Hash == c.Hash {
		t.Fatal("an edit of the profile file left the hash as it was")
	}
	if got := ShapeDiff(a.Shape, c.Shape); !reflect.DeepEqual(got, []string{"seccompProfile"}) {
		t.Errorf("changed keys %v, want seccompProfile", got)
	}
}

func TestBuildSpecCACerts(t *testing.T) {
	plain := buildTestSpec(t, nil)
	ca := func(value, pem string) *Spec {
		return buildTestSpec(t, func(in *SpecInput) {
			in.Config.CACerts, in.CACerts, in.CADir = value, []byte(pem), "/state/ca/app-1a2b3c"
			in.Config.Env["GIT_SSL_CAINFO"] = "/mine.pem"
		})
	}
	s := ca("host", "PEM one")
	var found bool
	for _, m := range s.Host.Mounts {
		if m.Target == "/etc/sbx/ca" {
			// Read-only: nothing in the sandbox may change what its later commands trust.
			found = m.Source == "/state/ca/app-1a2b3c" && m.Type == mount.TypeBind && m.ReadOnly
		}
	}
	if !found {
		t.Errorf("no read-only bind of the CA directory at /etc/sbx/ca: %+v", s.Host.Mounts)
	}
	for _, want := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS"} {
		if !slices.Contains(s.Container.Env, want+"=/etc/sbx/ca/ca-certificates.crt") {
			t.Errorf("%s does not point at the bundle: %q", want, s.Container.Env)
		}
	}
	if !slices.Contains(s.Container.Env, "GIT_SSL_CAINFO=/mine.pem") || slices.Contains(s.Container.Env, "GIT_SSL_CAINFO=/etc/sbx/ca/ca-certificates.crt") {
		t.Errorf("a variable the user set was replaced: %q", s.Container.Env)
	}
	for _, m := range plain.Host.Mounts {
		if m.Target == "/etc/sbx/ca" {
			t.Errorf("a CA mount without caCerts: %+v", m)
		}
	}
	if strings.Contains(strings.Join(plain.Container.Env, " "), "SSL_CERT_FILE") || strings.Contains(plain.Shape, "caCerts") {
		t.Errorf("caCerts shaped a sandbox without it: %q %s", plain.Container.Env, plain.Shape)
	}

	// The CAs' content shapes the sandbox, as the value does; where the bundle lives does not.
	if !slices.Contains(ShapeDiff(plain.Shape, s.Shape), "caCerts") {
		t.Errorf("adding CAs: shape %s", s.Shape)
	}
	if got := ShapeDiff(s.Shape, ca("host", "PEM two").Shape); !reflect.DeepEqual(got, []string{"caCerts"}) {
		t.Errorf("another certificate: ShapeDiff = %v, want [caCerts]", got)
	}
	if got := ShapeDiff(s.Shape, ca("/certs", "PEM one").Shape); !reflect.DeepEqual(got, []string{"caCerts"}) {
		t.Errorf("another value: ShapeDiff = %v, want [caCerts]", got)
	}
	if moved := buildTestSpec(t, func(in *SpecInput) {
		in.Config.CACerts, in.CACerts, in.CADir = "host", []byte("PEM one"), "/elsewhere"
		in.Config.Env["GIT_SSL_CAINFO"] = "/mine.pem"
	}); moved.Hash != s.Hash {
		t.Error("the host directory of the bundle changed the hash")
	}

	if _, err := BuildSpec(SpecInput{Name: "x", ProjectRoot: "/p", Config: func() config.Config { c := safeConfig(); c.CACerts = "host"; return c }()}); err == nil {
		t.Error("caCerts without a directory for the bundle was accepted")
	}
}

// isolation: gvisor runs the sandbox under sbx's runsc registration, with an agent that binds
// its own socket in its directory, mounted read-write (gVisor cannot accept on a listener
// handed over from the host), and a seccomp filter that lets clone3 through to gVisor's
// ENOSYS; it shapes the sandbox; the default leaves the hash of sandboxes made before the
// key as it was.
func TestBuildSpecGVisor(t *testing.T) {
	base := buildTestSpec(t, nil)
	explicit := buildTestSpec(t, func(in *SpecInput) { in.Config.Isolation = config.IsolationContainer })
	if base.Hash != explicit.Hash || strings.Contains(base.Shape, "isolation") {
		t.Errorf("isolation: container changed the hash or the shape: %s", explicit.Shape)
	}
	gv := buildTestSpec(t, func(in *SpecInput) { in.Config.Isolation = config.IsolationGVisor })
	if gv.Host.Runtime != "runsc-sbx" || base.Host.Runtime != "" {
		t.Errorf("runtimes %q (gvisor) and %q (container)", gv.Host.Runtime, base.Host.Runtime)
	}
	if *gv.Host.PidsLimit != 256*10+256 || *base.Host.PidsLimit != 256 {
		t.Errorf("engine pids limits %d (gvisor) and %d (container)", *gv.Host.PidsLimit, *base.Host.PidsLimit)
	}
	var nproc *container.Ulimit
	for _, u := range gv.Host.Ulimits {
		if u.Name == "nproc" {
			nproc = u
		}
	}
	if nproc == nil || nproc.Soft != 256 || nproc.Hard != 256 {
		t.Errorf("gVisor does not hold the sandbox to pidsLimit: nproc %+v", nproc)
	}
	lower := buildTestSpec(t, func(in *SpecInput) {
		in.Config.Isolation = config.IsolationGVisor
		in.Config.Ulimits = map[string]config.Ulimit{"nproc": {Soft: 50, Hard: 100}}
	})
	if u := lower.Host.Ulimits[0]; u.Name != "nproc" || u.Soft != 50 || u.Hard != 100 {
		t.Errorf("a lower nproc of the config's was raised: %+v", u)
	}
	if gv.Hash == base.Hash || !slices.Equal(ShapeDiff(base.Shape, gv.Shape), []string{"isolation", "seccompProfile"}) {
		t.Errorf("gvisor does not show as a change of isolation and its filter: %v", ShapeDiff(base.Shape, gv.Shape))
	}

	filter := func(s *Spec) (p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			ErrnoRet *uint    `json:"errnoRet"`
		} `json:"syscalls"`
	}) {
		t.Helper()
		for _, o := range s.Host.SecurityOpt {
			if j, ok := strings.CutPrefix(o, "seccomp="); ok {
				if err := json.Unmarshal([]byte(j), &p); err != nil {
					t.Fatal(err)
				}
			}
		}
		return p
	}
	// Every rule as in the default, but clone3's ENOSYS, which runsc turns into EPERM, and
	// pselect6 also under gVisor's name.
	bf, gf := filter(base), filter(gv)
	if bf.DefaultAction != "SCMP_ACT_ERRNO" || gf.DefaultAction != "SCMP_ACT_ERRNO" || len(bf.Syscalls) != len(gf.Syscalls) || len(bf.Syscalls) < 10 {
		t.Fatalf("filters: %s with %d rules (container), %s with %d (gvisor)", bf.DefaultAction, len(bf.Syscalls), gf.DefaultAction, len(gf.Syscalls))
	}
	changed := 0
	for i, b := range bf.Syscalls {
		g := gf.Syscalls[i]
		if reflect.DeepEqual(b, g) {
			continue
		}
		changed++
		clone3 := slices.Equal(b.Names, []string{"clone3"}) && b.Action == "SCMP_ACT_ERRNO" && b.ErrnoRet != nil && *b.ErrnoRet == 38 &&
			slices.Equal(g.Names, []string{"clone3"}) && g.Action == "SCMP_ACT_ALLOW" && g.ErrnoRet == nil
		pselect := slices.Contains(b.Names, "pselect6") && b.Action == "SCMP_ACT_ALLOW" && g.Action == "SCMP_ACT_ALLOW" &&
			slices.Equal(g.Names, append(slices.Clone(b.Names), "pselect"))
		if !clone3 && !pselect {
			t.Errorf("rule %d: %+v (container), %+v (gvisor)", i, b, g)
		}
	}
	if changed != 2 {
		t.Errorf("%d rules differ under gVisor, want clone3's and pselect6's", changed)
	}

	withAgent := func(iso string) *Spec {
		return buildTestSpec(t, func(in *SpecInput) { in.Config.Isolation, in.AgentDir = iso, "/state/agent/app-1a2b3c" })
	}
	for _, tt := range []struct {
		iso      string
		own, rw  bool
		wantArgs []string
	}{
		{config.IsolationContainer, false, false, []string{AgentBinaryPath, agent.Mode, AgentMountPath, "0"}},
		{config.IsolationGVisor, true, true, []string{AgentBinaryPath, agent.Mode, agent.OwnSocket, AgentMountPath, "0"}},
	} {
		s := withAgent(tt.iso)
		i := slices.IndexFunc(s.Host.Mounts, func(m mount.Mount) bool { return m.Target == AgentMountPath })
		if !slices.Equal(s.Container.Cmd, tt.wantArgs) || i < 0 || s.Host.Mounts[i].ReadOnly == tt.rw || s.Host.Mounts[i].Source != "/state/agent/app-1a2b3c" {
			t.Errorf("%s: cmd %q, mounts %+v", tt.iso, s.Container.Cmd, s.Host.Mounts)
		}
	}
}

func TestConfigShapeEgress(t *testing.T) {
	shape := func(rules ...string) string {
		cfg := safeConfig()
		cfg.Egress = rules
		s, _, err := ConfigShape(cfg, "/home/u/app")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	plain := shape()
	if strings.Contains(plain, "egress") {
		t.Errorf("egress shaped a sandbox without it: %s", plain)
	}
	debian := shape("@debian")
	if got := ShapeDiff(plain, debian); !reflect.DeepEqual(got, []string{"egress"}) {
		t.Errorf("adding egress: ShapeDiff = %v, want [egress]", got)
	}
	if got := ShapeDiff(debian, shape("@debian", "pypi.org")); !reflect.DeepEqual(got, []string{"egress"}) {
		t.Errorf("another destination: ShapeDiff = %v, want [egress]", got)
	}
}

// A pooled sandbox is made under its pool name and claimed by a rename: nothing it was made
// with may tell it from a sandbox created under the name it gets, but for its pool label.
func TestBuildSpecPooled(t *testing.T) {
	plain := buildTestSpec(t, nil)
	pooled := buildTestSpec(t, func(in *SpecInput) { in.Name, in.PoolKey = "pool-0123456789", "k1" })
	if plain.Container.Hostname != Hostname || pooled.Container.Hostname != Hostname {
		t.Errorf("hostnames %q and %q, want %q for every sandbox", plain.Container.Hostname, pooled.Container.Hostname, Hostname)
	}
	if plain.Container.Labels[LabelPool] != "" || pooled.Container.Labels[LabelPool] != "k1" {
		t.Errorf("pool labels %q and %q", plain.Container.Labels[LabelPool], pooled.Container.Labels[LabelPool])
	}
	if plain.Hash != pooled.Hash || plain.Shape != pooled.Shape {
		t.Error("the pool key or the name changed the config hash")
	}
}
