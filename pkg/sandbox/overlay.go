package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
)

// overlayPossible refuses workspace overlay, before anything is created, where it cannot
// work: off Linux, or with an engine that does not see this machine's files.
func (m *Manager) overlayPossible(in SpecInput) error {
	if in.Config.Workspace != config.WorkspaceOverlay {
		return nil
	}
	if err := overlay.Supported(); err != nil {
		return errs.Failure(fmt.Errorf("creating sandbox %q: %w", in.Name, err), "use workspace: ro or rw here")
	}
	if !m.HostPaths {
		return errs.Failure(fmt.Errorf("creating sandbox %q: workspace overlay needs an engine that sees this machine's files (the project and sbx's state directory), and this engine is not local", in.Name),
			"use workspace: ro or rw with this engine, or a local engine (DOCKER_HOST=unix:///var/run/docker.sock)")
	}
	return nil
}

// prepareOverlay makes the layers of in's overlay workspace, kept when they exist (a
// recreate keeps the sandbox's changes), and its volume anew: the volume is only the mount's
// recipe, and the recipe names the project, which a recreate may have moved.
func (m *Manager) prepareOverlay(ctx context.Context, in SpecInput) error {
	if in.Config.Workspace != config.WorkspaceOverlay {
		return nil
	}
	uidS, gidS, _ := strings.Cut(in.Config.User, ":")
	uid, err1 := strconv.Atoi(uidS)
	gid, err2 := strconv.Atoi(gidS)
	if err1 != nil || err2 != nil {
		return errs.Failure(fmt.Errorf("creating sandbox %q: workspace overlay needs a numeric user uid:gid, not %q", in.Name, in.Config.User),
			"set user: UID:GID, or leave it unset to run as the project's owner")
	}
	if err := os.MkdirAll(filepath.Dir(in.OverlayDir), 0o700); err != nil {
		return fmt.Errorf("creating sandbox %q: %w", in.Name, err)
	}
	lock, err := flock.Open(ctx, m.State.LockIn(AreaOverlay, in.Name), true, true)
	if err != nil {
		return fmt.Errorf("creating sandbox %q: %w", in.Name, err)
	}
	defer lock.Close()
	if err := overlay.Prepare(overlay.Layers{Lower: in.ProjectRoot, Dir: in.OverlayDir}, uid, gid); err != nil {
		return err
	}
	if err := m.Engine.VolumeRemove(ctx, OverlayVolumeName(in.Name), false); err != nil && !cerrdefs.IsNotFound(err) {
		return errs.Engine(fmt.Sprintf("replacing the overlay volume of %q", in.Name), err)
	}
	return nil
}

// removeOverlay removes sandbox name's overlay volume and layers, with their unapplied
// changes; a sandbox without them has nothing to remove.
func (m *Manager) removeOverlay(ctx context.Context, name string) error {
	if err := m.Engine.VolumeRemove(ctx, OverlayVolumeName(name), true); err != nil && !cerrdefs.IsNotFound(err) {
		return errs.Engine(fmt.Sprintf("removing the overlay volume of %q", name), err)
	}
	_ = m.State.remove(m.State.LockIn(AreaOverlay, name))
	err := m.State.remove(m.State.DirIn(AreaOverlay, name))
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		if err = m.clearWorkDir(ctx, name); err == nil {
			err = m.State.remove(m.State.DirIn(AreaOverlay, name))
		}
	}
	if err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q was removed, but not its overlay layers: %w", name, err),
			"sbx removes nothing outside its state directory; look at that path, and remove it yourself if it should go (as root: overlayfs leaves a directory of root's in work/)")
	}
	return nil
}

// clearWorkDir empties overlayfs's own work/work of sandbox name's layers, which the kernel
// makes as root with mode 0 and keeps a whiteout in: a user who is not root cannot remove
// it, so a short-lived helper container does, as root with no capability but
// CAP_DAC_OVERRIDE, and only the layers' directory mounted, nosuid and nodev.
func (m *Manager) clearWorkDir(ctx context.Context, name string) error {
	what := fmt.Sprintf("removing the overlay layers of %q", name)
	cfg := &container.Config{User: "0:0", Cmd: []string{"helper", "clear-workdir", "/layers"}}
	return m.runHelper(ctx, what, name, "-rm-overlay", cfg, []string{"DAC_OVERRIDE"}, "", hostDirMount(m.State.DirIn(AreaOverlay, name), "/layers"))
}

// claimOverlayVolume gives Podman's first mount of sandbox in's overlay volume to a helper
// running as the sandbox user, where the volume covers no directory of the image. Podman
// gives a named volume's root, at its first mount, to the owner of the image's directory
// under it (uid 1000 for /workspace in sbx's images), and an overlay's root is its upper
// layer's, which must stay the sandbox user's: a chown afterwards is not seen by a mount
// already made.
func (m *Manager) claimOverlayVolume(ctx context.Context, in SpecInput, volume string) error {
	f, err := m.facts(ctx)
	if err != nil || f.kind.Product != engine.ProductPodman || in.Config.Workspace != config.WorkspaceOverlay {
		return err
	}
	what := fmt.Sprintf("preparing the overlay volume of %q for %s", in.Name, f.kind)
	user, userns, err := m.engineUser(ctx, in.Config)
	if err != nil {
		return err
	}
	cfg := &container.Config{User: user, Cmd: []string{"--version"}}
	return m.runHelper(ctx, what, in.Name, "-claim-overlay", cfg, nil, userns, mount.Mount{Type: mount.TypeVolume, Source: volume, Target: "/claim"})
}

// runHelper runs sbx's own binary in a short-lived helper container for sandbox name's
// housekeeping (sbx's own image, never the sandbox's), with cfg's user and command, no
// capability but caps, no network, a read-only root, the user namespace mode userns and
// mounts, and waits for it to exit 0.
func (m *Manager) runHelper(ctx context.Context, what, name, suffix string, cfg *container.Config, caps []string, userns container.UsernsMode, mounts ...mount.Mount) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s: finding sbx's own binary: %w", what, err)
	}
	if err := m.ensureHelperImage(ctx); err != nil {
		return err
	}
	cfg.Labels = map[string]string{LabelManaged: "true", LabelRole: roleHelper, LabelName: name}
	host := &container.HostConfig{
		Mounts: append([]mount.Mount{
			{Type: mount.TypeBind, Source: bin, Target: helperBinary, ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
		}, mounts...),
		NetworkMode: "none", CapDrop: []string{"ALL"}, CapAdd: caps,
		SecurityOpt: []string{"no-new-privileges:true"}, ReadonlyRootfs: true, UsernsMode: userns,
	}
	if err := m.engineHostDirs(ctx, host); err != nil {
		return err
	}
	resp, err := m.Engine.ContainerCreate(ctx, helperSpec(cfg), host, nil, nil, ContainerName(name)+suffix)
	if err != nil {
		return errs.Engine(what, err)
	}
	defer func() {
		_ = m.Engine.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}()
	if err := m.Engine.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return errs.Engine(what, err)
	}
	// Until it has exited, checked every 50 ms for at most 30 s.
	for range 600 {
		info, err := m.Engine.ContainerInspect(ctx, resp.ID)
		if err != nil {
			return errs.Engine(what, err)
		}
		if info.State != nil && !info.State.Running && info.State.Status != "created" {
			if info.State.ExitCode != 0 {
				return fmt.Errorf("%s: the helper exited %d", what, info.State.ExitCode)
			}
			return nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: the helper did not finish in 30s", what)
}
