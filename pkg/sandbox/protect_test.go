package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/protect"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// createEngine is a fake engine on which the sandbox does not exist yet; it records what
// ContainerCreate was given.
func createEngine(host **container.HostConfig) *enginetest.FakeEngine {
	return &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errNotFound
		},
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) { return image.InspectResponse{}, nil },
		ContainerCreateFn: func(_ context.Context, _ *container.Config, h *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
			*host = h
			return container.CreateResponse{ID: "c1"}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { return nil },
	}
}

func targets(h *container.HostConfig) []string {
	var out []string
	for _, m := range h.Mounts {
		ro := "rw "
		if m.ReadOnly {
			ro = "ro "
		}
		out = append(out, ro+m.Target)
	}
	return out
}

func TestCreateRWMountsProtectedPaths(t *testing.T) {
	var host *container.HostConfig
	m := fakeManager(t, createEngine(&host))
	var warn bytes.Buffer
	m.Warn = &warn
	in := specInput()
	in.Config.Workspace = config.WorkspaceRW
	var gotRoot string
	var gotEntries []string
	m.Protect = func(root string, cfg config.Config) (*protect.Plan, error) {
		gotRoot, gotEntries = root, cfg.ProtectedPaths
		return &protect.Plan{Root: root, Mounts: []protect.Mount{{Path: ".git"}, {Path: ".git/hooks", ReadOnly: true}},
			Warnings: []string{"protected paths: stopped looking (the cap)"}}, nil
	}
	res, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res.Lease.Release()
	if gotRoot != "/src/app" || !slices.Equal(gotEntries, config.DefaultProtectedPaths) {
		t.Errorf("Protect got %q %q", gotRoot, gotEntries)
	}
	if got := targets(host); !slices.Equal(got, []string{"rw /workspace", "rw /workspace/.git", "ro /workspace/.git/hooks"}) {
		t.Errorf("mounts %q", got)
	}
	if warn.String() != "warning: sandbox \"app-123456\": protected paths: stopped looking (the cap)\n" {
		t.Errorf("warnings %q", warn.String())
	}
}

func TestCreateRWRefusedBeforeTheEngineIsAsked(t *testing.T) {
	// Only Inspect is stubbed: neither the image nor a container may be touched.
	fake := &enginetest.FakeEngine{ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		return container.InspectResponse{}, errNotFound
	}}
	m := fakeManager(t, fake)
	in := specInput()
	in.Config.Workspace = config.WorkspaceRW
	m.Protect = func(string, config.Config) (*protect.Plan, error) {
		return nil, errs.Failure(errors.New("protected paths: .vscode is a symbolic link"), "replace the link")
	}
	_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err == nil || err.Error() != `creating sandbox "app-123456" with a rw workspace: protected paths: .vscode is a symbolic link` ||
		errs.ExitCode(err) != errs.CodeFailure || errs.Hint(err) != "replace the link" {
		t.Errorf("got %v (exit %d, hint %q)", err, errs.ExitCode(err), errs.Hint(err))
	}
}

func TestCreateROAndNoneDoNotLookForProtectedPaths(t *testing.T) {
	for _, mode := range []string{config.WorkspaceRO, config.WorkspaceNone} {
		var host *container.HostConfig
		fake := createEngine(&host)
		m := fakeManager(t, fake)
		m.Protect = func(string, config.Config) (*protect.Plan, error) {
			t.Errorf("workspace %s looked for protected paths", mode)
			return &protect.Plan{}, nil
		}
		in := specInput()
		in.Config.Workspace = mode
		if mode == config.WorkspaceNone {
			fake.VolumeCreateFn = func(_ context.Context, o volume.CreateOptions) (volume.Volume, error) {
				return volume.Volume{Name: o.Name}, nil
			}
		}
		res, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res.Lease.Release()
		if len(host.Mounts) != 1 {
			t.Errorf("workspace %s: mounts %q", mode, targets(host))
		}
	}
}

// Without a stub, create finds the protected paths of the project on disk and makes the
// hooks directory and config file a git directory lacks before the engine mounts them.
func TestCreateRWOnDisk(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{".git/objects", ".vscode"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var host *container.HostConfig
	m := fakeManager(t, createEngine(&host))
	in := specInput()
	in.ProjectRoot = root
	in.Config.Workspace = config.WorkspaceRW
	res, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res.Lease.Release()
	want := []string{"rw /workspace", "rw /workspace/.git", "ro /workspace/.vscode", "ro /workspace/.git/config", "ro /workspace/.git/hooks"}
	if got := targets(host); !slices.Equal(got, want) {
		t.Errorf("mounts %q, want %q", got, want)
	}
	for _, mt := range host.Mounts[1:] {
		if _, err := os.Lstat(mt.Source); err != nil || mt.Type != mount.TypeBind || mt.BindOptions.Propagation != mount.PropagationRPrivate {
			t.Errorf("%+v: %v", mt, err)
		}
	}
}

// The engine mounts the same paths at every start: one removed on the host since create
// stops the sandbox from starting, and the hint says how to get past it.
func TestStartWithAMountSourceGone(t *testing.T) {
	var host *container.HostConfig
	fake := createEngine(&host)
	fake.ContainerStartFn = func(context.Context, string, container.StartOptions) error {
		return cerrdefs.ErrInvalidArgument.WithMessage(`invalid mount config for type "bind": bind source path does not exist: /src/app/.vscode`)
	}
	fake.ContainerRemoveFn = func(context.Context, string, container.RemoveOptions) error { return nil }
	_, err := fakeManager(t, fake).Ensure(context.Background(), specInput(), sandbox.EnsureOptions{})
	if err == nil || !strings.Contains(err.Error(), "bind source path does not exist") || errs.ExitCode(err) != errs.CodeFailure ||
		!strings.Contains(errs.Hint(err), "sbx create -n app-123456 --replace") {
		t.Errorf("got %v (hint %q)", err, errs.Hint(err))
	}
}
