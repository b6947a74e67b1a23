package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/system"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// engineFacts is what the engine said of itself, asked once per Manager.
type engineFacts struct {
	kind engine.Kind
	info system.Info
}

// facts asks the engine what it is, once.
func (m *Manager) facts(ctx context.Context) (*engineFacts, error) {
	m.factsMu.Lock()
	defer m.factsMu.Unlock()
	if m.engineFacts != nil {
		return m.engineFacts, nil
	}
	v, err := m.Engine.ServerVersion(ctx)
	if err != nil {
		return nil, errs.Engine("asking the engine for its version", err)
	}
	info, err := m.Engine.Info(ctx)
	if err != nil {
		return nil, errs.Engine("asking the engine about itself", err)
	}
	m.engineFacts = &engineFacts{kind: engine.Refine(ctx, m.Engine, engine.KindOf(v, info)), info: info}
	return m.engineFacts, nil
}

// EngineKind is what the engine is, and why it cannot apply sandboxes' limits ("" when it
// says it can).
func (m *Manager) EngineKind(ctx context.Context) (engine.Kind, string, error) {
	f, err := m.facts(ctx)
	if err != nil {
		return engine.Kind{}, "", err
	}
	return f.kind, engine.LimitsProblem(f.kind, f.info), nil
}

// unenforcedLimitsHint is how a user who accepts unlimited sandboxes says so: in their own
// config, as an untrusted project file cannot.
const unenforcedLimitsHint = "run a rootful engine, or a rootless one on cgroup v2 (systemd.unified_cgroup_hierarchy=1); " +
	"to run sandboxes without these limits anyway, set dangerouslyAllowUnenforcedLimits: true in your own config file"

// checkLimits fails, before anything is made, when the engine says it cannot apply cfg's
// limits, unless the user accepted that.
func (m *Manager) checkLimits(ctx context.Context, name string, cfg config.Config) error {
	f, err := m.facts(ctx)
	if err != nil {
		return err
	}
	p := engine.LimitsProblem(f.kind, f.info)
	switch {
	case p == "":
		return nil
	case cfg.DangerouslyAllowUnenforcedLimits:
		if m.Warn != nil {
			fmt.Fprintf(m.Warn, "warning: sandbox %q: %s; it runs without them (dangerouslyAllowUnenforcedLimits)\n", name, p)
		}
		return nil
	}
	return errs.Failure(fmt.Errorf("creating sandbox %q: %s", name, p), unenforcedLimitsHint)
}

// limitsNotApplied lists the limits the engine recorded otherwise than host asked for, in
// the container it created: Podman drops limits it cannot apply while its info says it can.
func limitsNotApplied(host *container.HostConfig, got container.InspectResponse) []string {
	if got.ContainerJSONBase == nil || got.HostConfig == nil {
		return []string{"all (the engine reports no host configuration)"}
	}
	var out []string
	check := func(name string, want, have int64) {
		if want != 0 && want != have {
			out = append(out, fmt.Sprintf("%s (asked %d, the engine set %d)", name, want, have))
		}
	}
	check("memory", host.Memory, got.HostConfig.Memory)
	check("memory+swap", host.MemorySwap, got.HostConfig.MemorySwap)
	check("cpus", host.NanoCPUs, got.HostConfig.NanoCPUs)
	var want, have int64
	if host.PidsLimit != nil {
		want = *host.PidsLimit
	}
	if got.HostConfig.PidsLimit != nil {
		have = *got.HostConfig.PidsLimit
	}
	check("pids", want, have)
	return out
}

// verifyLimits fails when the container id the engine created for sandbox name lacks limits
// host asked for, unless the user accepted that.
func (m *Manager) verifyLimits(ctx context.Context, name, id string, host *container.HostConfig, cfg config.Config) error {
	got, err := m.Engine.ContainerInspect(ctx, id)
	if err != nil {
		return errs.Engine(fmt.Sprintf("inspecting the new sandbox %q", name), err)
	}
	missing := limitsNotApplied(host, got)
	if len(missing) == 0 {
		return nil
	}
	p := "the engine did not apply its limits: " + strings.Join(missing, ", ")
	if f, ferr := m.facts(ctx); ferr == nil {
		p = f.kind.String() + " did not apply the sandbox's limits: " + strings.Join(missing, ", ")
	}
	if cfg.DangerouslyAllowUnenforcedLimits {
		if m.Warn != nil {
			fmt.Fprintf(m.Warn, "warning: sandbox %q: %s; it runs without them (dangerouslyAllowUnenforcedLimits)\n", name, p)
		}
		return nil
	}
	return errs.Failure(fmt.Errorf("creating sandbox %q: %s", name, p), unenforcedLimitsHint)
}

// cgroupLimitsNotHeld lists the limits host asked for that the sandbox's cgroup, as its
// agent read it, does not hold: none there, or a looser one. A limit the agent could not
// read is left to the engine's word (verifyLimits).
func cgroupLimitsNotHeld(host *container.HostConfig, got agent.CgroupLimits) []string {
	var out []string
	check := func(key, name string, want, have int64, unit string) {
		switch {
		case want <= 0 || !got.Known[key]:
		case have < 0:
			out = append(out, fmt.Sprintf("%s (asked %d%s, the cgroup has none)", name, want, unit))
		case have > want:
			out = append(out, fmt.Sprintf("%s (asked %d%s, the cgroup has %d)", name, want, unit, have))
		}
	}
	check("memory", "memory", host.Memory, got.Memory, " bytes")
	if host.PidsLimit != nil {
		check("pids", "pids", *host.PidsLimit, got.Pids, "")
	}
	if host.NanoCPUs > 0 && got.Known["cpu"] {
		// The engine sets QUOTA/PERIOD to the CPUs asked; one microsecond of slack for its
		// rounding.
		want := host.NanoCPUs * got.CPUPeriod / 1e9
		switch {
		case got.CPUQuota < 0:
			out = append(out, fmt.Sprintf("cpus (asked %s, the cgroup has none)", formatCPUs(host.NanoCPUs)))
		case got.CPUQuota > want+1:
			out = append(out, fmt.Sprintf("cpus (asked %s, the cgroup has %s)", formatCPUs(host.NanoCPUs), formatCPUs(got.CPUQuota*1e9/got.CPUPeriod)))
		}
	}
	return out
}

func formatCPUs(nano int64) string {
	return strconv.FormatFloat(float64(nano)/1e9, 'f', -1, 64)
}

// checkCgroupLimits asks the agent of sb, just started, for the limits of its cgroup, and
// stops sb when a limit it was created with (host, as the start's inspect reported it; nil
// when that inspect failed) is not there (a rootless engine on cgroup v1 keeps them in
// inspect and applies none), unless the user's own config accepted that at create
// (LabelUnenforcedLimits). An agent that cannot answer leaves the engine's word.
func (m *Manager) checkCgroupLimits(ctx context.Context, sb *Sandbox, host *container.HostConfig) error {
	dir := m.agentDirOf(sb)
	got, err := agent.Limits(ctx, dir)
	if err != nil {
		m.debugf("sandbox %q: its agent did not tell its cgroup's limits (%v); they are the engine's word", sb.Name, err)
		return nil
	}
	if host == nil {
		info, err := m.Engine.ContainerInspect(ctx, sb.ID)
		if err != nil {
			return errs.Engine(fmt.Sprintf("inspecting sandbox %q", sb.Name), err)
		}
		if info.ContainerJSONBase == nil || info.HostConfig == nil {
			return errs.Failure(fmt.Errorf("sandbox %q: the engine reports no host configuration", sb.Name), "")
		}
		host = info.HostConfig
	}
	missing := cgroupLimitsNotHeld(host, got)
	if len(missing) == 0 {
		return nil
	}
	p := "the engine did not apply its limits: " + strings.Join(missing, ", ")
	if f, ferr := m.facts(ctx); ferr == nil {
		p = f.kind.String() + " did not apply the sandbox's limits, its agent read in its cgroup: " + strings.Join(missing, ", ")
	}
	if sb.Labels[LabelUnenforcedLimits] == "accepted" {
		if m.Warn != nil {
			fmt.Fprintf(m.Warn, "warning: sandbox %q: %s; it runs without them (dangerouslyAllowUnenforcedLimits)\n", sb.Name, p)
		}
		return nil
	}
	zero := 0
	if err := m.Engine.ContainerStop(context.WithoutCancel(ctx), sb.ID, container.StopOptions{Timeout: &zero}); err != nil && !cerrdefs.IsNotFound(err) {
		m.debugf("sandbox %q: stopping it: %v", sb.Name, err)
	}
	return errs.Failure(fmt.Errorf("starting sandbox %q: %s", sb.Name, p), unenforcedLimitsHint)
}

// engineSecurityOpts rewrites host's inline seccomp profile for an engine that reads the
// value as a file path (Podman's compatible API: containers/podman#27710): the profile goes
// to a file named by its content, which the engine reads on this machine.
func (m *Manager) engineSecurityOpts(ctx context.Context, host *container.HostConfig) error {
	f, err := m.facts(ctx)
	if err != nil || f.kind.Product != engine.ProductPodman {
		return err
	}
	for i, opt := range host.SecurityOpt {
		profile, ok := strings.CutPrefix(opt, "seccomp=")
		if !ok || !strings.HasPrefix(strings.TrimSpace(profile), "{") {
			continue
		}
		if !m.HostPaths {
			return errs.Failure(fmt.Errorf("%s reads a seccomp profile from a file on its own machine, which sbx cannot write", f.kind),
				"use a Podman on this machine (its socket under /run), or Docker, which takes the profile in the request")
		}
		path, err := m.State.seccompFile([]byte(profile))
		if err != nil {
			return err
		}
		host.SecurityOpt[i] = "seccomp=" + path
	}
	return nil
}

// seccompFile writes profile to a file named by its content and returns its path; the
// file is the engine's to read (0644), written again only when it holds something else.
func (s *StateStore) seccompFile(profile []byte) (string, error) {
	sum := sha256.Sum256(profile)
	dir := filepath.Join(s.Dir, "seccomp")
	path := filepath.Join(dir, hex.EncodeToString(sum[:16])+".json")
	if b, err := os.ReadFile(path); err == nil && sha256.Sum256(b) == sum {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("writing the seccomp profile for the engine: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".profile-*")
	if err != nil {
		return "", fmt.Errorf("writing the seccomp profile for the engine: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(profile); err != nil {
		tmp.Close()
		return "", fmt.Errorf("writing the seccomp profile for the engine: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", fmt.Errorf("writing the seccomp profile for the engine: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("writing the seccomp profile for the engine: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("writing the seccomp profile for the engine: %w", err)
	}
	return path, nil
}

// engineHostDirs rewrites host's host-directory volumes (hostDirMount) for Podman, which
// drops the options of a volume declared in a mount and would give the container an empty
// volume of its own instead of the directory: a bind with the same mount options, which
// Podman takes in a bind's options (Docker does not).
func (m *Manager) engineHostDirs(ctx context.Context, host *container.HostConfig) error {
	f, err := m.facts(ctx)
	if err != nil || f.kind.Product != engine.ProductPodman {
		return err
	}
	kept := host.Mounts[:0]
	for _, mt := range host.Mounts {
		opts := map[string]string{}
		if mt.VolumeOptions != nil && mt.VolumeOptions.DriverConfig != nil {
			opts = mt.VolumeOptions.DriverConfig.Options
		}
		if mt.Type != mount.TypeVolume || mt.Source != "" || opts["type"] != "none" || opts["device"] == "" {
			kept = append(kept, mt)
			continue
		}
		var flags []string
		for _, o := range strings.Split(opts["o"], ",") {
			if o != "bind" && o != "rbind" {
				flags = append(flags, o)
			}
		}
		host.Binds = append(host.Binds, opts["device"]+":"+mt.Target+":"+strings.Join(append([]string{"rw"}, flags...), ","))
	}
	host.Mounts = kept
	return nil
}

// checkEngineSupport refuses, before anything is made, what sbx cannot yet make hold on
// the engine, rather than a sandbox that silently lacks it: a rw or overlay workspace on a
// rootless engine whose sandbox user is not the engine's (so not mapped to a uid that owns
// the project: engineUser); egress where the sandbox reaches its proxy through a socket
// (egressOverSocket) and gets no agent to relay to it.
func (m *Manager) checkEngineSupport(ctx context.Context, name string, cfg config.Config) error {
	if _, _, err := m.engineUser(ctx, cfg); err != nil {
		return errs.Failure(fmt.Errorf("creating sandbox %q: %w", name, err),
			"leave user: unset (the project's owner, you) or set it to your uid:gid; or use workspace: ro and copy results out with sbx cp")
	}
	f, err := m.facts(ctx)
	if err != nil {
		return err
	}
	if len(cfg.Egress) > 0 && egressOverSocket(f.kind) && m.agentDir(name, cfg) == "" {
		return errs.Failure(fmt.Errorf("creating sandbox %q: egress on %s needs sbx's agent in the sandbox, to relay %s to its proxy's socket (the sandbox has no network), and it gets none: %s",
			name, f.kind, ProxyLoopback, m.noAgentReason(cfg)),
			"use network: none, or rootless Podman or Docker for an egress allowlist")
	}
	return nil
}

// engineUser is the user a sandbox with cfg runs as in the container, and the user
// namespace mode it needs, so that a rw or overlay workspace writes to the project as the
// sandbox's user on the host. A rootful engine maps no uid. A rootless engine maps the
// container's uids into its user's subordinate ones, so only the engine's user (the user
// running sbx, whose socket it is) can be mapped to itself: Podman keeps that uid in the
// container (keep-id); rootless Docker maps the container's root to it, so the sandbox runs
// as uid 0 there, which without capabilities and with no new privileges is no stronger than
// any other uid, and owns on the host only what the user owns. Other workspaces write nothing
// of the host's, and keep the user as it is.
func (m *Manager) engineUser(ctx context.Context, cfg config.Config) (string, container.UsernsMode, error) {
	f, err := m.facts(ctx)
	if err != nil {
		return "", "", err
	}
	if !f.kind.Rootless || (cfg.Workspace != config.WorkspaceRW && cfg.Workspace != config.WorkspaceOverlay) {
		return cfg.User, "", nil
	}
	uid, gid := processUser()
	if cfg.User != fmt.Sprintf("%d:%d", uid, gid) {
		return "", "", fmt.Errorf("workspace %s on %s: the sandbox's user %s is not the engine's user (%d:%d, you), the only one it maps to itself, so its writes would not land as %s",
			cfg.Workspace, f.kind, cfg.User, uid, gid, cfg.User)
	}
	if f.kind.Product == engine.ProductPodman {
		return cfg.User, "keep-id", nil
	}
	return "0:0", "", nil
}

// processUser is the uid and gid sbx runs as: a rootless engine's user.
var processUser = func() (int, int) { return os.Getuid(), os.Getgid() }

// engineUserSpec gives spec the user and user namespace engineUser chose for cfg, and the
// tmpfs mounts the sandbox's user owned (the profiles' home) to the user it runs as.
func (m *Manager) engineUserSpec(ctx context.Context, spec *Spec, cfg config.Config) error {
	user, userns, err := m.engineUser(ctx, cfg)
	if err != nil || user == cfg.User && userns == "" {
		return err
	}
	spec.Host.UsernsMode = userns
	if user == cfg.User {
		return nil
	}
	spec.Container.User = user
	fromUID, fromGID, _ := strings.Cut(cfg.User, ":")
	toUID, toGID, _ := strings.Cut(user, ":")
	for path, opts := range spec.Host.Tmpfs {
		parts := strings.Split(opts, ",")
		for i, o := range parts {
			switch o {
			case "uid=" + fromUID:
				parts[i] = "uid=" + toUID
			case "gid=" + fromGID:
				parts[i] = "gid=" + toGID
			}
		}
		spec.Host.Tmpfs[path] = strings.Join(parts, ",")
	}
	return nil
}
