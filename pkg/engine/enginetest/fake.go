package enginetest

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/pkg/engine"
)

// FakeEngine is a engine.Engine whose every method is a stub. A call to a method the test
// did not stub fails the test and returns an error, so nothing silently reaches a daemon.
type FakeEngine struct {
	T testing.TB

	PingFn                  func(ctx context.Context) (types.Ping, error)
	ServerVersionFn         func(ctx context.Context) (types.Version, error)
	InfoFn                  func(ctx context.Context) (system.Info, error)
	ImageInspectFn          func(ctx context.Context, imageID string) (image.InspectResponse, error)
	ImageListFn             func(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImageBuildFn            func(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
	ImageRemoveFn           func(ctx context.Context, imageID string, options image.RemoveOptions) ([]image.DeleteResponse, error)
	ImagePullFn             func(ctx context.Context, ref string, options image.PullOptions) (io.ReadCloser, error)
	ImageImportFn           func(ctx context.Context, source image.ImportSource, ref string, options image.ImportOptions) (io.ReadCloser, error)
	ContainerCreateFn       func(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStartFn        func(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerInspectFn      func(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerListFn         func(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerStopFn         func(ctx context.Context, containerID string, options container.StopOptions) error
	ContainerRemoveFn       func(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerRenameFn       func(ctx context.Context, containerID, newContainerName string) error
	ContainerWaitFn         func(ctx context.Context, containerID string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerLogsFn         func(ctx context.Context, containerID string, options container.LogsOptions) (io.ReadCloser, error)
	EventsFn                func(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	ContainerPauseFn        func(ctx context.Context, containerID string) error
	ContainerUnpauseFn      func(ctx context.Context, containerID string) error
	ContainerStatsFn        func(ctx context.Context, containerID string, stream bool) (container.StatsResponseReader, error)
	ContainerStatsOneShotFn func(ctx context.Context, containerID string) (container.StatsResponseReader, error)
	CopyFromContainerFn     func(ctx context.Context, containerID, srcPath string) (io.ReadCloser, container.PathStat, error)
	ContainerExecCreateFn   func(ctx context.Context, containerID string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttachFn   func(ctx context.Context, execID string, config container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspectFn  func(ctx context.Context, execID string) (container.ExecInspect, error)
	ContainerExecResizeFn   func(ctx context.Context, execID string, options container.ResizeOptions) error
	VolumeCreateFn          func(ctx context.Context, options volume.CreateOptions) (volume.Volume, error)
	VolumeListFn            func(ctx context.Context, options volume.ListOptions) (volume.ListResponse, error)
	VolumeRemoveFn          func(ctx context.Context, volumeID string, force bool) error
	NetworkCreateFn         func(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error)
	NetworkInspectFn        func(ctx context.Context, networkID string, options network.InspectOptions) (network.Inspect, error)
	NetworkListFn           func(ctx context.Context, options network.ListOptions) ([]network.Summary, error)
	NetworkRemoveFn         func(ctx context.Context, networkID string) error
	NetworkConnectFn        func(ctx context.Context, networkID, containerID string, config *network.EndpointSettings) error

	// created holds the host configuration of each container ContainerCreateFn made, which
	// ContainerInspect reports as an engine would when its stub says none.
	mu      sync.Mutex
	created map[string]*container.HostConfig
}

// Docker has f answer ServerVersion and Info, unless stubbed, as a rootful Docker 20.10 on
// cgroup v2 that applies every limit: what a sandbox's create asks first. It returns f.
func (f *FakeEngine) Docker() *FakeEngine {
	if f.ServerVersionFn == nil {
		f.ServerVersionFn = func(context.Context) (types.Version, error) {
			return types.Version{Version: "20.10.24", APIVersion: "1.41", Components: []types.ComponentVersion{{Name: "Engine", Version: "20.10.24"}}}, nil
		}
	}
	if f.InfoFn == nil {
		f.InfoFn = func(context.Context) (system.Info, error) {
			return system.Info{CgroupVersion: "2", MemoryLimit: true, CPUCfsQuota: true, PidsLimit: true, SecurityOptions: []string{"name=seccomp,profile=builtin"}}, nil
		}
	}
	return f
}

var _ engine.Engine = (*FakeEngine)(nil)

func (f *FakeEngine) unstubbed(method string) error {
	f.T.Helper()
	f.T.Errorf("FakeEngine: unexpected call to %s (not stubbed)", method)
	return fmt.Errorf("fake engine: %s not stubbed", method)
}

func (f *FakeEngine) DaemonHost() string    { return "unix:///fake/docker.sock" }
func (f *FakeEngine) ClientVersion() string { return "1.41" }
func (f *FakeEngine) Close() error          { return nil }

func (f *FakeEngine) Ping(ctx context.Context) (types.Ping, error) {
	if f.PingFn == nil {
		return types.Ping{}, f.unstubbed("Ping")
	}
	return f.PingFn(ctx)
}

func (f *FakeEngine) ServerVersion(ctx context.Context) (types.Version, error) {
	if f.ServerVersionFn == nil {
		return types.Version{}, f.unstubbed("ServerVersion")
	}
	return f.ServerVersionFn(ctx)
}

func (f *FakeEngine) Info(ctx context.Context) (system.Info, error) {
	if f.InfoFn == nil {
		return system.Info{}, f.unstubbed("Info")
	}
	return f.InfoFn(ctx)
}

func (f *FakeEngine) ImageInspect(ctx context.Context, imageID string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	if f.ImageInspectFn == nil {
		return image.InspectResponse{}, f.unstubbed("ImageInspect")
	}
	return f.ImageInspectFn(ctx, imageID)
}

func (f *FakeEngine) ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error) {
	if f.ImageListFn == nil {
		return nil, f.unstubbed("ImageList")
	}
	return f.ImageListFn(ctx, options)
}

func (f *FakeEngine) ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	if f.ImageBuildFn == nil {
		return build.ImageBuildResponse{}, f.unstubbed("ImageBuild")
	}
	return f.ImageBuildFn(ctx, buildContext, options)
}

func (f *FakeEngine) ImageRemove(ctx context.Context, imageID string, options image.RemoveOptions) ([]image.DeleteResponse, error) {
	if f.ImageRemoveFn == nil {
		return nil, f.unstubbed("ImageRemove")
	}
	return f.ImageRemoveFn(ctx, imageID, options)
}

func (f *FakeEngine) ImageImport(ctx context.Context, source image.ImportSource, ref string, options image.ImportOptions) (io.ReadCloser, error) {
	if f.ImageImportFn == nil {
		return nil, f.unstubbed("ImageImport")
	}
	return f.ImageImportFn(ctx, source, ref, options)
}

func (f *FakeEngine) ImagePull(ctx context.Context, ref string, options image.PullOptions) (io.ReadCloser, error) {
	if f.ImagePullFn == nil {
		return nil, f.unstubbed("ImagePull")
	}
	return f.ImagePullFn(ctx, ref, options)
}

func (f *FakeEngine) ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error) {
	if f.ContainerCreateFn == nil {
		return container.CreateResponse{}, f.unstubbed("ContainerCreate")
	}
	resp, err := f.ContainerCreateFn(ctx, config, hostConfig, networkingConfig, platform, containerName)
	if err == nil && hostConfig != nil {
		f.mu.Lock()
		if f.created == nil {
			f.created = map[string]*container.HostConfig{}
		}
		f.created[resp.ID] = hostConfig
		f.mu.Unlock()
	}
	return resp, err
}

func (f *FakeEngine) ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error {
	if f.ContainerStartFn == nil {
		return f.unstubbed("ContainerStart")
	}
	return f.ContainerStartFn(ctx, containerID, options)
}

func (f *FakeEngine) ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error) {
	f.mu.Lock()
	host := f.created[containerID]
	f.mu.Unlock()
	made := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: containerID, HostConfig: host, State: &container.State{Status: "created"}}}
	if f.ContainerInspectFn == nil {
		if host != nil {
			return made, nil
		}
		return container.InspectResponse{}, f.unstubbed("ContainerInspect")
	}
	resp, err := f.ContainerInspectFn(ctx, containerID)
	if host != nil && cerrdefs.IsNotFound(err) {
		// A stub that knows only the containers before the test's create.
		return made, nil
	}
	if err == nil && host != nil {
		if resp.ContainerJSONBase == nil {
			resp.ContainerJSONBase = &container.ContainerJSONBase{ID: containerID}
		}
		if resp.HostConfig == nil {
			resp.HostConfig = host
		}
	}
	return resp, err
}

func (f *FakeEngine) ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error) {
	if f.ContainerListFn == nil {
		return nil, f.unstubbed("ContainerList")
	}
	return f.ContainerListFn(ctx, options)
}

func (f *FakeEngine) ContainerStop(ctx context.Context, containerID string, options container.StopOptions) error {
	if f.ContainerStopFn == nil {
		return f.unstubbed("ContainerStop")
	}
	return f.ContainerStopFn(ctx, containerID, options)
}

func (f *FakeEngine) ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error {
	if f.ContainerRemoveFn == nil {
		return f.unstubbed("ContainerRemove")
	}
	return f.ContainerRemoveFn(ctx, containerID, options)
}

func (f *FakeEngine) ContainerRename(ctx context.Context, containerID, newContainerName string) error {
	if f.ContainerRenameFn == nil {
		return f.unstubbed("ContainerRename")
	}
	return f.ContainerRenameFn(ctx, containerID, newContainerName)
}

func (f *FakeEngine) ContainerWait(ctx context.Context, containerID string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
	if f.ContainerWaitFn == nil {
		errc := make(chan error, 1)
		errc <- f.unstubbed("ContainerWait")
		return nil, errc
	}
	return f.ContainerWaitFn(ctx, containerID, condition)
}

func (f *FakeEngine) Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error) {
	if f.EventsFn == nil {
		errc := make(chan error, 1)
		errc <- f.unstubbed("Events")
		return nil, errc
	}
	return f.EventsFn(ctx, options)
}

func (f *FakeEngine) ContainerLogs(ctx context.Context, containerID string, options container.LogsOptions) (io.ReadCloser, error) {
	if f.ContainerLogsFn == nil {
		return nil, f.unstubbed("ContainerLogs")
	}
	return f.ContainerLogsFn(ctx, containerID, options)
}

func (f *FakeEngine) ContainerPause(ctx context.Context, containerID string) error {
	if f.ContainerPauseFn == nil {
		return f.unstubbed("ContainerPause")
	}
	return f.ContainerPauseFn(ctx, containerID)
}

func (f *FakeEngine) ContainerUnpause(ctx context.Context, containerID string) error {
	if f.ContainerUnpauseFn == nil {
		return f.unstubbed("ContainerUnpause")
	}
	return f.ContainerUnpauseFn(ctx, containerID)
}

func (f *FakeEngine) ContainerStats(ctx context.Context, containerID string, stream bool) (container.StatsResponseReader, error) {
	if f.ContainerStatsFn == nil {
		return container.StatsResponseReader{}, f.unstubbed("ContainerStats")
	}
	return f.ContainerStatsFn(ctx, containerID, stream)
}

func (f *FakeEngine) ContainerStatsOneShot(ctx context.Context, containerID string) (container.StatsResponseReader, error) {
	if f.ContainerStatsOneShotFn == nil {
		return container.StatsResponseReader{}, f.unstubbed("ContainerStatsOneShot")
	}
	return f.ContainerStatsOneShotFn(ctx, containerID)
}

func (f *FakeEngine) CopyFromContainer(ctx context.Context, containerID, srcPath string) (io.ReadCloser, container.PathStat, error) {
	if f.CopyFromContainerFn == nil {
		return nil, container.PathStat{}, f.unstubbed("CopyFromContainer")
	}
	return f.CopyFromContainerFn(ctx, containerID, srcPath)
}

func (f *FakeEngine) ContainerExecCreate(ctx context.Context, containerID string, options container.ExecOptions) (container.ExecCreateResponse, error) {
	if f.ContainerExecCreateFn == nil {
		return container.ExecCreateResponse{}, f.unstubbed("ContainerExecCreate")
	}
	return f.ContainerExecCreateFn(ctx, containerID, options)
}

func (f *FakeEngine) ContainerExecAttach(ctx context.Context, execID string, config container.ExecAttachOptions) (types.HijackedResponse, error) {
	if f.ContainerExecAttachFn == nil {
		return types.HijackedResponse{}, f.unstubbed("ContainerExecAttach")
	}
	return f.ContainerExecAttachFn(ctx, execID, config)
}

func (f *FakeEngine) ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error) {
	if f.ContainerExecInspectFn == nil {
		return container.ExecInspect{}, f.unstubbed("ContainerExecInspect")
	}
	return f.ContainerExecInspectFn(ctx, execID)
}

func (f *FakeEngine) ContainerExecResize(ctx context.Context, execID string, options container.ResizeOptions) error {
	if f.ContainerExecResizeFn == nil {
		return f.unstubbed("ContainerExecResize")
	}
	return f.ContainerExecResizeFn(ctx, execID, options)
}

func (f *FakeEngine) VolumeCreate(ctx context.Context, options volume.CreateOptions) (volume.Volume, error) {
	if f.VolumeCreateFn == nil {
		return volume.Volume{}, f.unstubbed("VolumeCreate")
	}
	return f.VolumeCreateFn(ctx, options)
}

func (f *FakeEngine) VolumeList(ctx context.Context, options volume.ListOptions) (volume.ListResponse, error) {
	if f.VolumeListFn == nil {
		return volume.ListResponse{}, f.unstubbed("VolumeList")
	}
	return f.VolumeListFn(ctx, options)
}

func (f *FakeEngine) VolumeRemove(ctx context.Context, volumeID string, force bool) error {
	if f.VolumeRemoveFn == nil {
		return f.unstubbed("VolumeRemove")
	}
	return f.VolumeRemoveFn(ctx, volumeID, force)
}

func (f *FakeEngine) NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error) {
	if f.NetworkCreateFn == nil {
		return network.CreateResponse{}, f.unstubbed("NetworkCreate")
	}
	return f.NetworkCreateFn(ctx, name, options)
}

func (f *FakeEngine) NetworkInspect(ctx context.Context, networkID string, options network.InspectOptions) (network.Inspect, error) {
	if f.NetworkInspectFn == nil {
		return network.Inspect{}, f.unstubbed("NetworkInspect")
	}
	return f.NetworkInspectFn(ctx, networkID, options)
}

func (f *FakeEngine) NetworkList(ctx context.Context, options network.ListOptions) ([]network.Summary, error) {
	if f.NetworkListFn == nil {
		return nil, f.unstubbed("NetworkList")
	}
	return f.NetworkListFn(ctx, options)
}

func (f *FakeEngine) NetworkRemove(ctx context.Context, networkID string) error {
	if f.NetworkRemoveFn == nil {
		return f.unstubbed("NetworkRemove")
	}
	return f.NetworkRemoveFn(ctx, networkID)
}

func (f *FakeEngine) NetworkConnect(ctx context.Context, networkID, containerID string, config *network.EndpointSettings) error {
	if f.NetworkConnectFn == nil {
		return f.unstubbed("NetworkConnect")
	}
	return f.NetworkConnectFn(ctx, networkID, containerID, config)
}
