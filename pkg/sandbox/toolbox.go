package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/internal/lazyre"
	"github.com/sbx-sandbox/sbx/pkg/archive"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// sbx's scripts need bash and a few tools (setsid, flock, tar, find...) that an image sbx does
// not bundle may lack. Such a sandbox gets the toolbox: static bash and busybox from Debian's
// packages, built once as an image (images/Dockerfile.toolbox), copied out once into the state
// directory and bind-mounted read-only at ToolboxMountPath. Like the agent's directory it
// needs an engine that sees this machine's files, and it stays out of the config hash: it is
// how sbx reaches into the sandbox, not what the sandbox may do. The sandbox's LabelToolbox
// says it has one, and so which bash runs sbx's scripts there (Sandbox.Script).

const (
	// LabelToolbox is the hash of the toolbox a sandbox mounts (images.ToolboxHash); empty,
	// or from an older sbx absent, when it has none.
	LabelToolbox = "dev.sbx.toolbox"
	// ToolboxMountPath is where the toolbox appears inside a sandbox; bin/ under it holds one
	// link per busybox applet, flock and bash.
	ToolboxMountPath = "/run/sbx-tools"
	// maxApplets bounds the applet list read from the toolbox image.
	maxApplets = 64 << 10
)

// toolboxPrelude starts every script sbx runs in a sandbox with the toolbox: the toolbox's
// programs come after the image's own on PATH, so a Debian image keeps its GNU tools and a
// busybox-only one finds them. Commands the scripts start (a user's command under the exec
// wrapper, a shell session's shell) inherit it.
const toolboxPrelude = "case :$PATH: in *:" + ToolboxMountPath + "/bin:*) ;; *) PATH=${PATH:+$PATH:}" + ToolboxMountPath + "/bin; export PATH ;; esac\n"

// hasToolbox reports whether the sandbox mounts the toolbox. sbx sets LabelToolbox on every
// sandbox it makes and empties it on images that carry it, so the label can be believed.
func (sb *Sandbox) hasToolbox() bool { return sb.Labels[LabelToolbox] != "" }

// Bash is the bash that runs sbx's scripts, and the MCP server's commands, in the sandbox:
// the toolbox's when it has one, else the image's.
func (sb *Sandbox) Bash() string {
	if sb.hasToolbox() {
		return ToolboxMountPath + "/bash"
	}
	return "bash"
}

// Script is the command line that runs script, one of sbx's own, in the sandbox as argv0
// with args: the one place that says which bash runs it and where its tools come from.
func (sb *Sandbox) Script(script, argv0 string, args ...string) []string {
	if sb.hasToolbox() {
		script = toolboxPrelude + script
	}
	return append([]string{sb.Bash(), "-c", script, argv0}, args...)
}

// WouldMountToolbox reports whether a new sandbox with cfg gets the toolbox: an image sbx does
// not bundle (they have bash and GNU tools), on an engine that sees this machine's files.
func (m *Manager) WouldMountToolbox(cfg config.Config) bool {
	_, bundled := images.ProfileFor(cfg.Image)
	return m.Agents && m.State != nil && !bundled
}

// toolboxDir is the host directory of the toolbox for a new sandbox name with cfg, made when
// missing, or "" when the sandbox gets none: a bundled image (it has bash and GNU tools), an
// engine that cannot see this machine's files, or a toolbox that could not be made, which
// leaves the sandbox as sbx made them before the toolbox, with a warning.
func (m *Manager) toolboxDir(ctx context.Context, name string, cfg config.Config) (string, error) {
	if !m.WouldMountToolbox(cfg) {
		return "", nil
	}
	dir, err := m.ensureToolbox(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if m.Warn != nil {
			fmt.Fprintf(m.Warn, "warning: sandbox %q gets no toolbox, so sbx's helpers need bash and its tools in the image: %v\n", name, err)
		}
		return "", nil
	}
	return dir, nil
}

// ensureToolbox returns the toolbox's directory in the state directory, copying it out of the
// toolbox image (built first when missing) when it is not there. The copy is made in a
// temporary directory beside it and renamed into place, so a directory under the final name
// is always complete; of two sbx making it at once, the second rename loses and uses the first.
func (m *Manager) ensureToolbox(ctx context.Context) (string, error) {
	dir := m.State.toolboxDir(images.ToolboxHash())
	if toolboxComplete(dir) {
		return dir, nil
	}
	imgs := &imagebuild.Images{Engine: m.Engine, Now: m.Now}
	tag, err := imgs.Toolbox(ctx, m.BuildProgress)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", fmt.Errorf("making the toolbox directory: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".new-")
	if err != nil {
		return "", fmt.Errorf("making the toolbox directory: %w", err)
	}
	defer func() { _ = m.State.remove(tmp) }()
	staged := filepath.Join(tmp, "toolbox")
	if err := m.copyToolbox(ctx, tag, staged); err != nil {
		return "", err
	}
	if err := os.Rename(staged, dir); err != nil && !toolboxComplete(dir) {
		return "", fmt.Errorf("putting the toolbox in place: %w", err)
	}
	return dir, nil
}

// toolboxComplete reports whether dir holds a toolbox put in place by ensureToolbox.
func toolboxComplete(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, "bin", "bash"))
	return err == nil && fi.Mode().Type() == fs.ModeSymlink
}

// copyToolbox copies /toolbox out of image tag into dst through a container that never starts,
// with the extractor sbx cp uses, then makes the links of bin/: the image holds none, as the
// extractor takes no links.
func (m *Manager) copyToolbox(ctx context.Context, tag, dst string) error {
	c, err := m.Engine.ContainerCreate(ctx, &container.Config{Image: tag}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return errs.Engine(fmt.Sprintf("creating a container of %s to copy the toolbox from", tag), err)
	}
	defer func() {
		_ = m.Engine.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true})
	}()
	rc, _, err := m.Engine.CopyFromContainer(ctx, c.ID, "/toolbox")
	if err != nil {
		return errs.Engine(fmt.Sprintf("copying the toolbox out of %s", tag), err)
	}
	defer rc.Close()
	if _, err := archive.Extract(ctx, rc, dst, archive.ExtractOptions{Base: "toolbox", MaxBytes: 256 << 20, MaxEntries: 100}); err != nil {
		return fmt.Errorf("copying the toolbox out of %s: %w", tag, err)
	}
	return linkApplets(dst)
}

// appletName is what an applet's name may be: a single path element.
var appletName = lazyre.New(`^(\[|\[\[|[A-Za-z0-9][A-Za-z0-9._+-]*)$`)

// linkApplets makes bin/NAME -> ../busybox in the toolbox at dir for each applet its image
// listed, and bin/bash -> ../bash last (toolboxComplete looks for it). Links are relative, so
// the toolbox works wherever it is mounted; one already in bin/ (flock) is kept.
func linkApplets(dir string) error {
	f, err := os.Open(filepath.Join(dir, "applets"))
	if err != nil {
		return fmt.Errorf("reading the toolbox's applet list: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxApplets))
	bin := filepath.Join(dir, "bin")
	for sc.Scan() {
		name := sc.Text()
		if !appletName().MatchString(name) || name == "bash" {
			return fmt.Errorf("the toolbox's applet list names %q, which is not an applet's name", name)
		}
		if err := os.Symlink("../busybox", filepath.Join(bin, name)); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("linking applet %s in the toolbox: %w", name, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the toolbox's applet list: %w", err)
	}
	if err := os.Symlink("../bash", filepath.Join(bin, "bash")); err != nil {
		return fmt.Errorf("linking bash in the toolbox: %w", err)
	}
	// Extract applies no umask: what the image holds is 0755 already, and the sandbox user,
	// whatever its uid, must read and run it.
	return os.Chmod(dir, 0o755)
}

// toolboxLabel is LabelToolbox's value for a sandbox that mounts the toolbox at dir.
func toolboxLabel(dir string) string {
	if dir == "" {
		return ""
	}
	return filepath.Base(dir)
}

// toolboxKeepAlive is KeepAlive from the toolbox.
func toolboxKeepAlive() []string {
	return append([]string{ToolboxMountPath + "/bin/" + KeepAlive[0]}, KeepAlive[1:]...)
}
