package sandbox

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/go-connections/nat"
	"github.com/docker/go-units"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/cacerts"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
	"github.com/sbx-sandbox/sbx/pkg/protect"
)

// Labels sbx puts on every sandbox, besides LabelAgent (agent.go). Nothing without
// LabelManaged=true is ever touched. Containers inherit their image's labels, so BuildSpec
// sets every one of these, empty when it has nothing to say, and empties any other dev.sbx.*
// label the image carries: what sbx reads back under labelPrefix is always its own.
const (
	// LabelManaged and LabelProfile are those of the bundled images, so one filter finds
	// everything sbx made.
	LabelManaged    = imagebuild.LabelManaged
	LabelProfile    = imagebuild.LabelProfile
	labelPrefix     = "dev.sbx."
	LabelName       = "dev.sbx.name"
	LabelProject    = "dev.sbx.project"
	LabelConfigHash = "dev.sbx.config-hash"
	LabelConfig     = "dev.sbx.config" // canonical JSON of the shaping keys, to name what changed
	LabelCreatedAt  = "dev.sbx.created-at"
	LabelVersion    = "dev.sbx.version"
	LabelWorkspace  = "dev.sbx.workspace"
	// LabelCreateSettings holds the flag settings the sandbox was created with (sbx create
	// --memory 2g, sbx browser), so later commands without those flags see no drift.
	LabelCreateSettings = "dev.sbx.create-settings"
	// LabelUnenforcedLimits says the user's own config accepted, at create, limits the
	// engine does not enforce (dangerouslyAllowUnenforcedLimits): a start checks them again.
	LabelUnenforcedLimits = "dev.sbx.unenforced-limits"
)

// Whatever a sandbox writes to its main process's stdout or stderr (/proc/1/fd/1 is open to
// every process of the sandbox user) lands in the engine's container log, on the engine's
// disk: every sandbox gets one json-file log of at most logMaxSize, whatever the engine's
// default driver, so sbx can still show the tail of a failed start.
const (
	logDriver  = "json-file"
	logMaxSize = "1m"
)

// Hostname is every sandbox's host name. Not its name: the engine cannot change a host name
// after create, and a sandbox taken from the pool (pool.go) must look like a new one.
const Hostname = "sbx"

// WorkspacePath is where the project (or the private volume) appears inside a sandbox.
const WorkspacePath = "/workspace"

// KeepAlive is the sandbox's main process; work happens in execs.
var KeepAlive = []string{"sleep", "infinity"}

// ContainerName is the engine name of sandbox NAME.
func ContainerName(name string) string { return "sbx-" + name }

// VolumeName is the private workspace volume of sandbox NAME in workspace mode none.
func VolumeName(name string) string { return "sbx-" + name + "-ws" }

// OverlayVolumeName is the volume that mounts sandbox NAME's overlay workspace: a local
// volume of type overlay, which holds no data of its own (the layers are on the host).
func OverlayVolumeName(name string) string { return "sbx-" + name + "-ov" }

// shapingKeys are the config keys that shape the container; per-exec settings (mode, timeout,
// passEnv), policy and prune rules are left out so changing them never forces a recreate.
var shapingKeys = []string{
	"image", "workspace", "workdir", "user", "readOnlyRoot", "tmpfs", "network", "capDrop", "capAdd",
	"init", "memory", "memorySwap", "cpus", "pidsLimit", "ulimits", "env", "binds", "seccompProfile",
	"apparmorProfile", "runtime", "dns", "extraHosts", "shmSize", "idleStop",
}

// SpecInput is everything BuildSpec needs; the caller does all I/O.
type SpecInput struct {
	Name        string
	ProjectRoot string
	Config      config.Config
	// SeccompJSON is the content of Config.SeccompProfile, read by the caller.
	SeccompJSON []byte
	// CACerts are the certificates Config.CACerts names, as PEM, read by the caller
	// (config.Resolved.CACertsPEM). Their digest enters the config hash, so a changed CA
	// shows as a change of caCerts.
	CACerts []byte
	// CADir is the host directory that holds the sandbox's CA bundle (cacerts.go), mounted
	// read-only at cacerts.MountDir; Manager.create sets it when Config.CACerts is set.
	CADir string
	// RunImage is the image the container runs when it is not Config.Image: the one derived
	// from it for Config.Setup (setup.go). Config.Image still decides what the image is
	// (bundled, so with the agent), and the setup keys enter the config hash.
	RunImage string
	// ImageVolumes are the VOLUME paths the image declares; each gets a tmpfs so no writable
	// anonymous volume appears behind the read-only root.
	ImageVolumes []string
	// ImageLabels are the image's labels, which the engine copies onto the container.
	ImageLabels map[string]string
	Version     string
	CreatedAt   time.Time
	// ExtraLabels are put on the container besides sbx's own; dev.sbx.* ones are ignored.
	ExtraLabels map[string]string
	// Ports are container ports ("9222/tcp") to publish on 127.0.0.1, never on another
	// address, with host ports the engine picks. They shape the container, so they enter
	// its config hash.
	Ports []string
	// OneOffEnv are NAME=VALUE variables for this container only, such as a generated
	// password. They override Config.Env and stay out of the labels and the config hash;
	// like all container variables, whoever controls the engine sees them (docker inspect).
	OneOffEnv []string
	// CreateSettings are the flag settings this sandbox is created with, kept in a label.
	CreateSettings []config.Setting
	// Carried puts a copy of the project (a ro or rw workspace) in the sandbox's volume
	// instead of binding it, for an engine that cannot see it (carry.go). It stays out of
	// the config hash: how the project gets there does not shape what the sandbox may do.
	Carried bool
	// AgentDir is the host directory for the agent's socket; "" runs KeepAlive instead of
	// the agent. It stays out of the config hash: the transport does not shape the sandbox.
	AgentDir string
	// ToolboxDir is the host directory of the toolbox (toolbox.go), mounted read-only at
	// ToolboxMountPath; "" mounts none. It stays out of the config hash, as AgentDir does.
	ToolboxDir string
	// AgentBinary is sbx's binary on the host, which a sandbox with AgentDir runs as its agent.
	AgentBinary string
	// RelayBinary is sbx's binary on the host, mounted read-only at RelayPath for a
	// browser sandbox's relay (pkg/browser); "" mounts none. It stays out of the config hash,
	// as AgentBinary does.
	RelayBinary string
	// EgressSubnet is the subnet of the network the sandbox shares with its proxy, when
	// Config.Egress is set (Manager.create makes it); the sandbox and the proxy have fixed
	// addresses in it. It stays out of the config hash: where the subnet lies shapes nothing.
	EgressSubnet netip.Prefix
	// EgressSocketDir is the host directory of the proxy's socket (egressSocketDir), set
	// instead of EgressSubnet where the sandbox reaches its proxy through that socket, with
	// no network at all (egressOverSocket): its agent relays ProxyLoopback to it.
	EgressSocketDir string
	// OverlayDir holds the sandbox's overlay layers (overlay.Layers) in workspace mode
	// overlay; Manager.create sets it. It stays out of the config hash.
	OverlayDir string
	// PoolKey is set on a sandbox made for the pool (pool.go), as its LabelPool label. It
	// stays out of the config hash: a claimed sandbox is current like a created one.
	PoolKey string
	// Protected are the project paths a rw workspace mounts on their own (protect.Find):
	// read-only over what the user's host tools obey, read-write onto themselves for the
	// directories on the way, so none can be renamed away. Other modes ignore them. They
	// depend on the tree at create, so only the protectedPaths key enters the config hash.
	Protected []protect.Mount
}

// Spec is the engine's view of a sandbox, ready for ContainerCreate.
type Spec struct {
	Name          string
	ContainerName string
	Container     *container.Config
	Host          *container.HostConfig
	Network       *network.NetworkingConfig
	Hash          string
	Shape         string
	// volumeOpts are the local driver's options of the workspace volume (an overlay's).
	volumeOpts map[string]string
}

// BuildSpec turns a resolved config into Docker API structs. It is pure: same input, same output.
func BuildSpec(in SpecInput) (*Spec, error) {
	cfg := in.Config
	shape, hash, err := in.Shape()
	if err != nil {
		return nil, err
	}
	if cfg.CACerts != "" && in.CADir == "" {
		return nil, fmt.Errorf("caCerts %s: no directory given for the bundle", cfg.CACerts)
	}
	if len(cfg.Egress) > 0 && !in.EgressSubnet.IsValid() && in.EgressSocketDir == "" {
		return nil, fmt.Errorf("egress: no network given for the sandbox and its proxy")
	}
	if in.EgressSocketDir != "" && in.AgentDir == "" {
		return nil, fmt.Errorf("egress through the proxy's socket needs sbx's agent in the sandbox, to relay %s to it", ProxyLoopback)
	}
	envMap := caEnv(cfg)
	switch {
	case in.EgressSocketDir != "":
		envMap = egressEnv(envMap, "http://"+ProxyLoopback)
	case len(cfg.Egress) > 0:
		envMap = egressEnv(envMap, ProxyURL(in.EgressSubnet))
	}
	env, err := containerEnv(envMap, in.OneOffEnv)
	if err != nil {
		return nil, err
	}
	exposed, bindings, err := loopbackPorts(in.Ports, cfg.Network)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range in.ExtraLabels {
		if !strings.HasPrefix(k, labelPrefix) {
			labels[k] = v
		}
	}
	for k := range in.ImageLabels {
		if strings.HasPrefix(k, labelPrefix) {
			labels[k] = "" // a container's value, even empty, hides the image's
		}
	}
	var settings []byte
	if len(in.CreateSettings) > 0 {
		if settings, err = json.Marshal(in.CreateSettings); err != nil {
			return nil, fmt.Errorf("encoding create settings: %w", err)
		}
	}
	agentVersion := ""
	if in.AgentDir != "" {
		agentVersion = agent.Version()
	}
	maps.Copy(labels, map[string]string{
		LabelManaged:        "true",
		LabelName:           in.Name,
		LabelProject:        in.ProjectRoot,
		LabelConfigHash:     hash,
		LabelConfig:         shape,
		LabelCreatedAt:      in.CreatedAt.UTC().Format(time.RFC3339),
		LabelVersion:        in.Version,
		LabelProfile:        cfg.Profile,
		LabelWorkspace:      cfg.Workspace,
		LabelCreateSettings: string(settings),
		LabelAgent:          agentVersion,
		LabelToolbox:        toolboxLabel(in.ToolboxDir),
		LabelPool:           in.PoolKey,
	})
	if in.Carried {
		labels[LabelCarry] = CarryCopy
	}
	if cfg.DangerouslyAllowUnenforcedLimits {
		labels[LabelUnenforcedLimits] = "accepted"
	}

	spec := &Spec{Name: in.Name, ContainerName: ContainerName(in.Name), Hash: hash, Shape: shape}
	if cfg.Workspace == config.WorkspaceOverlay {
		spec.volumeOpts = overlay.Layers{Lower: in.ProjectRoot, Dir: in.OverlayDir}.MountOptions()
	}
	spec.Container = &container.Config{
		Image:      cmp.Or(in.RunImage, cfg.Image),
		Cmd:        slices.Clone(KeepAlive),
		User:       cfg.User,
		WorkingDir: cfg.Workdir,
		Env:        env,
		Labels:     labels,
		Hostname:   Hostname,
		StopTimeout: func() *int {
			s := 2
			return &s
		}(),
	}
	spec.Container.ExposedPorts = exposed

	tmpfs := map[string]string{}
	for _, t := range cfg.Tmpfs {
		tmpfs[t.Path] = strings.Join(t.Options, ",")
	}
	for _, v := range in.ImageVolumes {
		if _, ok := tmpfs[v]; !ok && v != WorkspacePath {
			tmpfs[v] = "size=64m,nosuid,nodev,noexec"
		}
	}

	secOpts := []string{"no-new-privileges:true"}
	if cfg.SeccompProfile != "" {
		if len(in.SeccompJSON) == 0 {
			return nil, fmt.Errorf("seccomp profile %s: no content given", cfg.SeccompProfile)
		}
		secOpts = append(secOpts, "seccomp="+string(in.SeccompJSON))
	} else {
		profile, _ := seccompFor(cfg.Isolation)
		secOpts = append(secOpts, "seccomp="+profile)
	}
	if cfg.ApparmorProfile != "" {
		secOpts = append(secOpts, "apparmor="+cfg.ApparmorProfile)
	}

	mounts, err := workspaceMounts(in, labels)
	if err != nil {
		return nil, err
	}
	if in.ToolboxDir != "" {
		// The image may have no sleep on its PATH (FROM scratch with a busybox).
		spec.Container.Cmd = toolboxKeepAlive()
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: in.ToolboxDir, Target: ToolboxMountPath, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	if in.AgentDir != "" {
		if in.AgentBinary == "" {
			return nil, errors.New("an agent directory without the agent's binary")
		}
		var path string
		if in.ToolboxDir != "" {
			path = ToolboxMountPath + "/bin"
		}
		ownSocket := agentOwnsSocket(cfg.Isolation)
		forward := ""
		if in.EgressSocketDir != "" {
			forward = ProxyLoopback + "=" + EgressSocketMountPath + "/" + ProxySocket
			// Read-only: connecting to a socket needs no write access.
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: in.EgressSocketDir, Target: EgressSocketMountPath, ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
		}
		spec.Container.Cmd = agent.Cmd(AgentBinaryPath, AgentMountPath, cfg.IdleStop, path, ownSocket, forward)
		// Read-only: sbx makes the sockets on the host, and nothing in the sandbox, whatever
		// its uid, can store a byte there or change a mode (EROFS). But for an agent that
		// binds its socket itself, under gVisor (gvisoragent.go).
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: in.AgentDir, Target: AgentMountPath, ReadOnly: !ownSocket,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			mount.Mount{Type: mount.TypeBind, Source: in.AgentBinary, Target: AgentBinaryPath, ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	if in.RelayBinary != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: in.RelayBinary, Target: RelayPath, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	if cfg.CACerts != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: in.CADir, Target: cacerts.MountDir, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	for _, b := range cfg.Binds {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}

	pids, limits := cfg.PidsLimit, cfg.Ulimits
	if cfg.Isolation == config.IsolationGVisor {
		pids, limits = gvisorPids(cfg.PidsLimit, cfg.Ulimits)
	}
	init := cfg.Init
	spec.Host = &container.HostConfig{
		ReadonlyRootfs: cfg.ReadOnlyRoot,
		Tmpfs:          tmpfs,
		Mounts:         mounts,
		CapDrop:        slices.Clone(cfg.CapDrop),
		CapAdd:         slices.Clone(cfg.CapAdd),
		SecurityOpt:    secOpts,
		NetworkMode:    container.NetworkMode(networkMode(in.Name, cfg.Network)),
		PortBindings:   bindings,
		Init:           &init,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig:      container.LogConfig{Type: logDriver, Config: map[string]string{"max-size": logMaxSize, "max-file": "1"}},
		Runtime:        cfg.EngineRuntime(),
		DNS:            slices.Clone(cfg.DNS),
		ExtraHosts:     slices.Clone(cfg.ExtraHosts),
		ShmSize:        cfg.ShmSize,
		Resources: container.Resources{
			Memory:     cfg.Memory,
			MemorySwap: cfg.MemorySwap,
			NanoCPUs:   int64(cfg.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits:    ulimits(limits),
		},
	}
	spec.Network = &network.NetworkingConfig{}
	switch {
	case in.EgressSocketDir != "":
		spec.Host.NetworkMode = "none"
	case len(cfg.Egress) > 0:
		_, addr := egressAddrs(in.EgressSubnet)
		spec.Host.NetworkMode = container.NetworkMode(EgressNetworkName(in.Name))
		spec.Network.EndpointsConfig = map[string]*network.EndpointSettings{
			EgressNetworkName(in.Name): {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr.String()}},
		}
	}
	return spec, nil
}

func workspaceMounts(in SpecInput, labels map[string]string) ([]mount.Mount, error) {
	if in.Carried {
		return []mount.Mount{{Type: mount.TypeVolume, Source: VolumeName(in.Name), Target: WorkspacePath}}, nil
	}
	switch in.Config.Workspace {
	case "ro", "rw":
		if !path.IsAbs(in.ProjectRoot) {
			return nil, fmt.Errorf("project root %q is not absolute", in.ProjectRoot)
		}
		mounts := []mount.Mount{{Type: mount.TypeBind, Source: in.ProjectRoot, Target: WorkspacePath,
			ReadOnly: in.Config.Workspace == "ro", BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}}
		if in.Config.Workspace == "rw" {
			protected, err := protectedMounts(in.ProjectRoot, in.Protected)
			if err != nil {
				return nil, err
			}
			mounts = append(mounts, protected...)
		}
		return mounts, nil
	case "none":
		return []mount.Mount{{Type: mount.TypeVolume, Source: VolumeName(in.Name), Target: WorkspacePath}}, nil
	case config.WorkspaceOverlay:
		if !path.IsAbs(in.ProjectRoot) || !path.IsAbs(in.OverlayDir) {
			return nil, fmt.Errorf("overlay workspace: the project root %q and the layers' directory %q must be absolute", in.ProjectRoot, in.OverlayDir)
		}
		return []mount.Mount{{Type: mount.TypeVolume, Source: OverlayVolumeName(in.Name), Target: WorkspacePath}}, nil
	}
	return nil, fmt.Errorf("workspace mode %q is not one of none, ro, rw, overlay", in.Config.Workspace)
}

// protectedMounts binds each protected path and pin of a rw workspace at its place under
// WorkspacePath, parents before children so that none is hidden by a later one.
func protectedMounts(root string, ms []protect.Mount) ([]mount.Mount, error) {
	ms = slices.Clone(ms)
	protect.SortMounts(ms)
	out := make([]mount.Mount, 0, len(ms))
	for i, m := range ms {
		if m.Path == "" || m.Path == "." || path.IsAbs(m.Path) || path.Clean(m.Path) != m.Path || m.Path == ".." || strings.HasPrefix(m.Path, "../") {
			return nil, fmt.Errorf("protected path %q is not a clean path inside the project", m.Path)
		}
		if i > 0 && ms[i-1].Path == m.Path {
			return nil, fmt.Errorf("protected path %q is mounted twice", m.Path)
		}
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: path.Join(root, m.Path), Target: path.Join(WorkspacePath, m.Path),
			ReadOnly: m.ReadOnly, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	return out, nil
}

// VolumeSpec is the private workspace volume for sandbox name, carrying the container's labels.
func (s *Spec) VolumeSpec() *volume.CreateOptions {
	if s.Host == nil {
		return nil
	}
	for _, m := range s.Host.Mounts {
		if m.Type == mount.TypeVolume && m.Target == WorkspacePath {
			labels := map[string]string{}
			for _, k := range []string{LabelManaged, LabelName, LabelProject, LabelCreatedAt, LabelVersion} {
				labels[k] = s.Container.Labels[k]
			}
			for k, v := range s.Container.Labels {
				if !strings.HasPrefix(k, labelPrefix) {
					labels[k] = v
				}
			}
			opts := &volume.CreateOptions{Name: m.Source, Labels: labels}
			if s.volumeOpts != nil {
				opts.Driver, opts.DriverOpts = "local", maps.Clone(s.volumeOpts)
			}
			return opts
		}
	}
	return nil
}

// ConfigShape returns the canonical JSON of the keys that shape the container, and its SHA-256.
// Go's encoder sorts map keys, so equal configs give equal bytes.
func ConfigShape(cfg config.Config, projectRoot string) (shape, hash string, err error) {
	return configShape(cfg, projectRoot, nil, contentSums{})
}

// Shape is ConfigShape plus the published ports, which shape the container too. Without
// ports it equals ConfigShape, so sandboxes that publish nothing keep their hash.
func (in SpecInput) Shape() (shape, hash string, err error) {
	ports, err := normalizePorts(in.Ports)
	if err != nil {
		return "", "", err
	}
	return configShape(in.Config, in.ProjectRoot, ports, contentSums{seccomp: sumOf(in.SeccompJSON), caCerts: sumOf(in.CACerts)})
}

// contentSums are the SHA-256 digests of what the files some keys name hold, "" when not
// given: a digest stands beside the key's value in the shape, so an edit of a file is a
// change like any other.
type contentSums struct{ seccomp, caCerts string }

func sumOf(data []byte) string {
	if data == nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func configShape(cfg config.Config, projectRoot string, ports []string, sums contentSums) (shape, hash string, err error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return "", "", fmt.Errorf("encoding config: %w", err)
	}
	key := string(raw) + "\x00" + projectRoot + "\x00" + strings.Join(ports, "\x00") + "\x00" + sums.seccomp + "\x00" + sums.caCerts
	if v, ok := shapeMemo.Load(key); ok {
		r := v.([2]string)
		return r[0], r[1], nil
	}
	shape, hash, err = shapeOf(cfg, raw, projectRoot, ports, sums)
	if err == nil {
		shapeMemo.Store(key, [2]string{shape, hash})
	}
	return shape, hash, err
}

// shapeMemo remembers shapes by their input: sbx ls computes one per sandbox, and most
// sandboxes share a config. The inputs a process sees are few.
var shapeMemo sync.Map

func shapeOf(cfg config.Config, raw []byte, projectRoot string, ports []string, sums contentSums) (shape, hash string, err error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		return "", "", fmt.Errorf("encoding config: %w", err)
	}
	kept := map[string]json.RawMessage{}
	for _, k := range shapingKeys {
		kept[k] = all[k]
	}
	root, _ := json.Marshal(projectRoot)
	kept["project"] = root
	// Not a config key, but it shapes the container: sandboxes made before the cap show
	// "logs" as changed and are recreated like any other drift.
	kept["logs"], _ = json.Marshal(logDriver + " max-size=" + logMaxSize)
	if ownsNetwork(cfg.Network) {
		// Likewise: sandboxes made on the shared bridge show this as changed.
		kept["ownNetwork"], _ = json.Marshal(true)
	}
	switch {
	case cfg.SeccompProfile == "":
		_, id := seccompFor(cfg.Isolation)
		kept["seccompProfile"], _ = json.Marshal(id)
	case sums.seccomp != "":
		kept["seccompProfile"], _ = json.Marshal(cfg.SeccompProfile + " sha256:" + sums.seccomp)
	}
	if len(ports) > 0 {
		kept["ports"], _ = json.Marshal(ports)
	}
	if len(cfg.Egress) > 0 {
		// Only when set, so sandboxes without a proxy keep their hash. As written, presets
		// unexpanded: a preset's entries change with sbx's version, like its images.
		kept["egress"], _ = json.Marshal(cfg.Egress)
	}
	if !cfg.Setup.Empty() {
		// Only when set, so sandboxes without setup keep their hash: a changed setup runs
		// another derived image.
		kept["setup"], _ = json.Marshal(cfg.Setup)
	}
	if cfg.Isolation == config.IsolationGVisor {
		// Only when set, so sandboxes made before the key keep their hash.
		kept["isolation"], _ = json.Marshal(cfg.Isolation)
	}
	if cfg.CACerts != "" {
		// Only when set, so sandboxes without extra CAs keep their hash.
		kept["caCerts"], _ = json.Marshal(cfg.CACerts + " sha256:" + sums.caCerts)
	}
	if cfg.Workspace == config.WorkspaceRW {
		// Only rw mounts them, so ro and none sandboxes keep their hash. Their order does not
		// matter to what is protected.
		paths := slices.Compact(slices.Sorted(slices.Values(cfg.ProtectedPaths)))
		if paths == nil {
			paths = []string{}
		}
		kept["protectedPaths"], _ = json.Marshal(paths)
	}
	out, err := json.Marshal(kept)
	if err != nil {
		return "", "", fmt.Errorf("encoding config: %w", err)
	}
	sum := sha256.Sum256(out)
	return string(out), hex.EncodeToString(sum[:]), nil
}

// ShapeDiff lists the keys whose values differ between two shapes from ConfigShape. An
// unreadable old shape (a sandbox from another version) reports every key.
func ShapeDiff(oldShape, newShape string) []string {
	var a, b map[string]json.RawMessage
	if json.Unmarshal([]byte(oldShape), &a) != nil || json.Unmarshal([]byte(newShape), &b) != nil {
		return []string{"(all: the sandbox was created by another sbx version)"}
	}
	var diff []string
	for k := range b {
		if string(a[k]) != string(b[k]) {
			diff = append(diff, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			diff = append(diff, k)
		}
	}
	slices.Sort(diff)
	return diff
}

// LoopbackIP is the only host address sbx publishes ports on.
const LoopbackIP = "127.0.0.1"

// CanPublish reports whether a sandbox on network can publish ports: none has no ports to
// publish, container:<name> cannot, and host would expose the sandbox's listeners on every
// host address.
func CanPublish(network string) error {
	n := container.NetworkMode(network)
	switch {
	case n.IsNone(), n.IsHost(), n.IsContainer():
		return fmt.Errorf("network %s cannot publish ports on %s; use bridge or a user-defined network", network, LoopbackIP)
	}
	return nil
}

// normalizePorts checks container ports written PORT/PROTO (or PORT, meaning tcp) and
// returns them sorted, without duplicates, as PORT/PROTO.
func normalizePorts(ports []string) ([]string, error) {
	out := make([]string, 0, len(ports))
	for _, raw := range ports {
		num, proto, _ := strings.Cut(raw, "/")
		if proto == "" {
			proto = "tcp"
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 65535 || !slices.Contains([]string{"tcp", "udp", "sctp"}, proto) {
			return nil, fmt.Errorf("port %q: want a container port such as 9222/tcp", raw)
		}
		out = append(out, strconv.Itoa(n)+"/"+proto)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// loopbackPorts publishes each port on LoopbackIP with an engine-chosen host port.
func loopbackPorts(ports []string, network string) (nat.PortSet, nat.PortMap, error) {
	norm, err := normalizePorts(ports)
	if err != nil || len(norm) == 0 {
		return nil, nil, err
	}
	if err := CanPublish(network); err != nil {
		return nil, nil, err
	}
	exposed, bindings := nat.PortSet{}, nat.PortMap{}
	for _, p := range norm {
		exposed[nat.Port(p)] = struct{}{}
		bindings[nat.Port(p)] = []nat.PortBinding{{HostIP: LoopbackIP, HostPort: ""}}
	}
	return exposed, bindings, nil
}

// caEnv is the config's variables with those that point tools at the CA bundle when caCerts
// is set; a variable of the same name in the config is the user's choice and stays.
func caEnv(cfg config.Config) map[string]string {
	if cfg.CACerts == "" {
		return cfg.Env
	}
	env := maps.Clone(cfg.Env)
	if env == nil {
		env = map[string]string{}
	}
	for _, kv := range cacerts.Env() {
		name, value, _ := strings.Cut(kv, "=")
		if _, set := env[name]; !set {
			env[name] = value
		}
	}
	return env
}

// containerEnv is the config's variables, sorted, with the one-off ones replacing any of the
// same name and appended last.
func containerEnv(env map[string]string, oneOff []string) ([]string, error) {
	env = maps.Clone(env)
	var extra []string
	for i, kv := range oneOff {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsRune(kv, 0) {
			// Its text may be a secret, so the message does not show it.
			return nil, fmt.Errorf("one-off variable %d is not NAME=VALUE", i+1)
		}
		delete(env, name)
		extra = append(extra, kv)
	}
	return append(envList(env), extra...), nil
}

func envList(env map[string]string) []string {
	keys := slices.Sorted(maps.Keys(env))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

func ulimits(in map[string]config.Ulimit) []*container.Ulimit {
	names := slices.Sorted(maps.Keys(in))
	out := make([]*container.Ulimit, 0, len(names))
	for _, n := range names {
		out = append(out, &units.Ulimit{Name: n, Soft: in[n].Soft, Hard: in[n].Hard})
	}
	return out
}
