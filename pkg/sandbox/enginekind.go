package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"

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
		return nil, engineErr("asking the engine for its version", err)
	}
	info, err := m.Engine.Info(ctx)
	if err != nil {
		return nil, engineErr("asking the engine about itself", err)
	}
	m.engineFacts = &engineFacts{kind: engine.KindOf(v, info), info: info}
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
		return engineErr(fmt.Sprintf("inspecting the new sandbox %q", name), err)
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
