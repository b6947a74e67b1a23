// Package imagebuild builds and checks sbx's bundled images on an engine. It reports what a
// build does as events (see Event) and draws nothing: cmd/ shows them.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Labels every bundled image carries. Sandboxes carry LabelManaged and LabelProfile too
// (pkg/sandbox names them again), so whatever sbx made is found by the same label.
const (
	LabelManaged        = "dev.sbx.managed"
	LabelProfile        = "dev.sbx.profile"
	LabelDockerfileHash = "dev.sbx.dockerfile-hash"
)

// State of a bundled image on the engine.
const (
	ImagePresent = "present" // built from the Dockerfile this sbx bundles
	ImageMissing = "missing"
	ImageStale   = "stale" // built from another Dockerfile, or not by sbx
)

// ImageStatus is what the engine holds for one image. Its JSON field names are those of
// "sbx image ls --json".
type ImageStatus struct {
	Profile string    `json:"profile"` // "" for an image that is not bundled
	Tag     string    `json:"tag"`
	State   string    `json:"status"` // present, missing or stale
	ID      string    `json:"id,omitempty"`
	Size    int64     `json:"size"`             // bytes, 0 when missing
	Created time.Time `json:"created,omitzero"` // when the image was built
	// DockerfileHash is images.Hash of the bundled files; ImageHash is the image's
	// dev.sbx.dockerfile-hash label. They differ when the image is stale.
	DockerfileHash string `json:"dockerfileHash"`
	ImageHash      string `json:"imageHash,omitempty"`
	Detail         string `json:"detail,omitempty"` // why it is stale
	// From and Setup describe an image derived for setup (derive.go): the configured image
	// it was built on and what it installs.
	From  string        `json:"from,omitempty"`
	Setup *config.Setup `json:"setup,omitempty"`
}

// Engine is the part of engine.Engine that building and checking images needs.
type Engine interface {
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
	ImageRemove(ctx context.Context, imageID string, options image.RemoveOptions) ([]image.DeleteResponse, error)
	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImagePull(ctx context.Context, ref string, options image.PullOptions) (io.ReadCloser, error)
}

var _ Engine = engine.Engine(nil)

// Images builds and checks sbx's bundled images on an engine. It is meant for one command's
// use, not for concurrent use.
type Images struct {
	Engine Engine
	// Files holds the Dockerfiles; nil means the ones embedded in sbx. Tests swap it to see
	// an image go stale.
	Files fs.FS
	// Now times builds and their steps; nil means time.Now.
	Now func() time.Time

	// Auth returns the encoded credentials (registryauth.Auth.Encode) for a registry, and
	// where they came from; nil pulls without credentials.
	Auth func(ctx context.Context, registry string) (auth, source string, err error)

	// replaced are images a rebuild untagged; they are removed once nothing uses them.
	replaced []string
}

// BuildOptions tune a build of a bundled image.
type BuildOptions struct {
	NoCache bool
	// Network is the network RUN steps use; "" is the engine's default (bridge). "host"
	// helps on engines whose bridge cannot reach a package mirror.
	Network string
	// Progress receives the build's events; nil discards them.
	Progress Progress
}

// BuildResult describes a finished build.
type BuildResult struct {
	Profile string
	Tag     string
	ID      string
	Elapsed time.Duration
}

func (m *Images) files() fs.FS {
	if m.Files == nil {
		return images.Files
	}
	return m.Files
}

func (m *Images) now() time.Time {
	if m.Now == nil {
		return time.Now()
	}
	return m.Now()
}

// Ensure makes sure the image ref exists before a sandbox uses it: a missing bundled image
// is built, reporting to p, a stale one is noted on p and used as it is, and a missing image
// sbx does not bundle is pulled.
func (m *Images) Ensure(ctx context.Context, ref string, p Progress) (ImageStatus, error) {
	profile, bundled := images.ProfileFor(ref)
	if !bundled {
		st, err := m.inspect(ctx, "", ref)
		if err != nil {
			return st, err
		}
		if st.State == ImageMissing {
			if err := m.Pull(ctx, ref, p); err != nil {
				return st, err
			}
			return m.inspect(ctx, "", ref)
		}
		return st, nil
	}
	st, err := m.Status(ctx, profile)
	if err != nil {
		return st, err
	}
	switch st.State {
	case ImageMissing:
		p.notef("image %s is missing; building it (first use, this takes a few minutes)\n", ref)
		if _, err := m.Build(ctx, profile, BuildOptions{Progress: p}); err != nil {
			return st, err
		}
		return m.Status(ctx, profile)
	case ImageStale:
		p.notef("warning: image %s is stale (%s); using it anyway\nhint: rebuild it with: sbx image build %s\n", ref, st.Detail, profile)
	}
	return st, nil
}

// List returns the status of every bundled image, in build order.
func (m *Images) List(ctx context.Context) ([]ImageStatus, error) {
	var list []ImageStatus
	for _, profile := range images.Profiles {
		st, err := m.Status(ctx, profile)
		if err != nil {
			return nil, err
		}
		list = append(list, st)
	}
	return list, nil
}

// Status reports whether the image of a bundled profile is present, missing or stale.
func (m *Images) Status(ctx context.Context, profile string) (ImageStatus, error) {
	tag, ok := images.TagFor(profile)
	if !ok {
		return ImageStatus{}, unknownProfile(profile)
	}
	hash, err := images.Hash(m.files(), profile)
	if err != nil {
		return ImageStatus{}, err
	}
	st, err := m.inspect(ctx, profile, tag)
	st.DockerfileHash = hash
	if err != nil || st.State == ImageMissing {
		return st, err
	}
	switch {
	case st.ImageHash == "":
		st.State, st.Detail = ImageStale, "it has no "+LabelDockerfileHash+" label, so sbx did not build it"
	case st.ImageHash != hash:
		st.State, st.Detail = ImageStale, "built from other Dockerfiles than this sbx bundles"
	}
	return st, nil
}

func (m *Images) inspect(ctx context.Context, profile, ref string) (ImageStatus, error) {
	st := ImageStatus{Profile: profile, Tag: ref, State: ImageMissing}
	info, err := m.Engine.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return st, nil
	}
	if err != nil {
		return st, errs.Failure(fmt.Errorf("inspecting image %s: %w", ref, err), "")
	}
	st.State, st.ID, st.Size = ImagePresent, info.ID, info.Size
	st.Created, _ = time.Parse(time.RFC3339Nano, info.Created)
	if info.Config != nil {
		st.ImageHash = info.Config.Labels[LabelDockerfileHash]
	}
	return st, nil
}

// Build builds the image of a bundled profile from the embedded files. An image built on
// another bundled image builds that one first when it is missing or stale, so the label
// never claims a base the image was not built on.
func (m *Images) Build(ctx context.Context, profile string, opts BuildOptions) (BuildResult, error) {
	tag, ok := images.TagFor(profile)
	if !ok {
		return BuildResult{}, unknownProfile(profile)
	}
	buildArgs := map[string]*string{}
	if base := images.BaseOf(profile); base != "" {
		st, err := m.Status(ctx, base)
		if err != nil {
			return BuildResult{}, err
		}
		if st.State != ImagePresent {
			opts.Progress.notef("%s is built on %s, which is %s; building that first\n", tag, st.Tag, st.State)
			if _, err := m.Build(ctx, base, opts); err != nil {
				return BuildResult{}, err
			}
		}
		buildArgs["BASE_IMAGE"] = &st.Tag
	}
	before, err := m.Status(ctx, profile)
	if err != nil {
		return BuildResult{}, err
	}
	tarball, err := buildContext(m.files(), profile)
	if err != nil {
		return BuildResult{}, err
	}
	files := images.ContextFiles(profile)
	res, err := m.runBuild(ctx, tarball, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  files[0].Name,
		BuildArgs:   buildArgs,
		Labels:      map[string]string{LabelManaged: "true", LabelProfile: profile, LabelDockerfileHash: before.DockerfileHash},
		NoCache:     opts.NoCache,
		NetworkMode: opts.Network,
	}, profile, func(err error) string { return networkHint(profile, opts.Network, err.Error()) }, opts.Progress)
	if err != nil {
		var be *BuildError
		if errors.As(err, &be) {
			be.network = opts.Network
		}
		return res, err
	}
	if before.ID != "" && before.ID != res.ID {
		m.replaced = append(m.replaced, before.ID)
	}
	m.removeReplaced(ctx, opts.Progress)
	return res, nil
}

// removeReplaced deletes images that rebuilds untagged, so old multi-gigabyte layers do not
// pile up. One still used by a container, or as the parent of another, stays for a later try.
func (m *Images) removeReplaced(ctx context.Context, p Progress) {
	kept := m.replaced[:0]
	for _, id := range m.replaced {
		if _, err := m.Engine.ImageRemove(ctx, id, image.RemoveOptions{PruneChildren: true}); err != nil {
			if !cerrdefs.IsNotFound(err) {
				kept = append(kept, id)
			}
			continue
		}
		p.notef("removed the replaced image %s\n", ShortID(id))
	}
	m.replaced = kept
}

// buildContext is the tar stream of a profile's build context, made from fsys alone, with
// fixed owners and times so the same files always give the same bytes.
func buildContext(fsys fs.FS, profile string) (io.Reader, error) {
	files := images.ContextFiles(profile)
	if len(files) == 0 {
		return nil, unknownProfile(profile)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f.Name)
		if err != nil {
			return nil, fmt.Errorf("reading bundled %s: %w", f.Name, err)
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     f.Name,
			Mode:     int64(f.Mode.Perm()),
			Size:     int64(len(data)),
			ModTime:  time.Unix(0, 0),
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

func unknownProfile(profile string) error {
	return errs.Usagef("no bundled image for profile %q", profile).
		WithHint("choose one of sandbox, common, browser")
}

// ShortID is an image ID as the docker CLI shows it: its algorithm and 12 hex digits.
func ShortID(id string) string {
	if len(id) > len("sha256:")+12 {
		return id[:len("sha256:")+12]
	}
	return id
}

// runBuild runs one classic build of the context with bo (tagged bo.Tags[0]; intermediate
// containers removed) and follows it with progress; profile names a bundled image, "" any
// other. hint, when set, says what to do about an engine that refuses the build.
func (m *Images) runBuild(ctx context.Context, buildContext io.Reader, bo build.ImageBuildOptions, profile string, hint func(error) string, p Progress) (BuildResult, error) {
	tag := bo.Tags[0]
	bo.Remove, bo.ForceRemove = true, true
	// The classic builder is the one every engine has; BuildKit needs a session the API alone
	// does not give.
	bo.Version = build.BuilderV1
	resp, err := m.Engine.ImageBuild(ctx, buildContext, bo)
	if err != nil {
		if ctx.Err() != nil {
			return BuildResult{}, ctx.Err()
		}
		h := ""
		if hint != nil {
			h = hint(err)
		}
		return BuildResult{}, errs.Failure(fmt.Errorf("building image %s: %w", tag, err), h)
	}
	defer resp.Body.Close()
	return m.follow(ctx, resp.Body, profile, tag, p)
}
