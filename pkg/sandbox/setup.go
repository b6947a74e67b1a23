package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/image"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// A sandbox with setup runs an image derived from its configured one (imagebuild.Derive),
// built before the sandbox is created when none with the same inputs exists. The build's RUN
// step has no way out but an egress proxy of its own: the same proxy a sandbox with egress
// gets (egress.go), on an internal network made for the build, named for the build's hash,
// with the sandbox's egress list plus the preset of each package manager setup uses, and
// removed when the build ends. The engine's classic builder runs RUN steps on that network
// and hands them HTTP(S)_PROXY as build arguments, which the image does not keep; a tool
// that ignores them reaches nothing. caCerts' certificates are trusted during the build.

// setupPresets are the egress presets each package manager of setup needs.
var setupPresets = []struct {
	preset string
	list   func(config.Setup) []string
}{
	{"@debian", func(s config.Setup) []string { return s.Apt }},
	{"@node", func(s config.Setup) []string { return s.Npm }},
	{"@python", func(s config.Setup) []string { return s.Pip }},
}

// SetupEgress is the allowlist of a setup's build: cfg's egress list and the presets of
// the package managers its setup uses.
func SetupEgress(cfg config.Config) []string {
	allow := slices.Clone(cfg.Egress)
	for _, p := range setupPresets {
		if len(p.list(cfg.Setup)) > 0 && !slices.Contains(allow, p.preset) {
			allow = append(allow, p.preset)
		}
	}
	return allow
}

// setupBuildName is the name the egress of a derived image's build goes by (its network,
// proxy and rules directory), as a sandbox's would; leftovers of a killed build are orphans
// that sbx prune removes.
func setupBuildName(tag string) string {
	return "setup-" + strings.TrimPrefix(tag, imagebuild.DerivedRepo+":")[:12]
}

// derive returns the image in's sandbox runs, derived from base (in.Config.Image, inspected)
// with in.Config.Setup, and builds it when the engine does not have it. One sbx builds a
// given image at a time; the others wait and find it built.
func (m *Manager) derive(ctx context.Context, in SpecInput, base image.InspectResponse) (string, error) {
	setup := in.Config.Setup
	tag := imagebuild.DerivedTag(base.ID, setup)
	imgs := &imagebuild.Images{Engine: m.Engine, Now: m.Now}
	if _, err := m.Engine.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	}
	if m.State == nil {
		return "", errs.Failure(fmt.Errorf("sandbox %q: building its setup needs sbx's state directory for the build's proxy", in.Name), "")
	}
	f, err := m.facts(ctx)
	if err != nil {
		return "", err
	}
	if egressOverSocket(f.kind) {
		// A build runs the image's own programs, with no agent to relay to the proxy's
		// socket: it could reach its proxy only over a network, which here is the host's.
		return "", errs.Failure(fmt.Errorf("sandbox %q: building its setup on %s: a build reaches its proxy over a network of the engine's, and a rootful Podman's networks put an address of this machine's on them", in.Name, f.kind),
			"build the image yourself (podman build) and name it in image:, or use rootless Podman or Docker for setup:")
	}
	name := setupBuildName(tag)
	if err := os.MkdirAll(m.State.Dir, 0o700); err != nil {
		return "", errs.Failure(fmt.Errorf("sandbox %q: making sbx's state directory: %w", in.Name, err), "")
	}
	lock, err := flock.Open(ctx, filepath.Join(m.State.Dir, "."+name+".lock"), true, true)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", errs.Failure(fmt.Errorf("sandbox %q: locking the build of its setup: %w", in.Name, err), "")
	}
	defer lock.Close()
	if _, err := m.Engine.ImageInspect(ctx, tag); err == nil {
		return tag, nil // another sbx built it while this one waited
	}
	build := SpecInput{Name: name, ProjectRoot: in.ProjectRoot, Version: in.Version, CreatedAt: m.Now(), ExtraLabels: in.ExtraLabels,
		Config: config.Config{Image: in.Config.Image, Egress: SetupEgress(in.Config)}}
	defer func() { _ = m.removeEgress(context.WithoutCancel(ctx), name, true) }()
	if err := m.createEgress(ctx, &build); err != nil {
		return "", err
	}
	if err := m.startProxy(ctx, name); err != nil {
		return "", err
	}
	user := ""
	if base.Config != nil {
		user = base.Config.User
	}
	return imgs.Derive(ctx, imagebuild.DeriveInput{
		Base: in.Config.Image, BaseID: base.ID, BaseUser: user, Setup: setup, CACerts: in.CACerts,
		Network: EgressNetworkName(name), Proxy: ProxyURL(build.EgressSubnet), Progress: m.BuildProgress,
	})
}
