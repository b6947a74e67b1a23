package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Toolbox returns the tag of sbx's toolbox image (images.ToolboxFiles), building it first
// when the engine does not have it. The tag is made of the Dockerfile's hash, so a present
// image is the right one.
func (m *Images) Toolbox(ctx context.Context, p Progress) (string, error) {
	tag := images.ToolboxTag()
	if _, err := m.Engine.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", errs.Failure(fmt.Errorf("inspecting image %s: %w", tag, err), "")
	}
	p.notef("building %s: the toolbox sbx mounts into sandboxes on images it does not bundle (first use)\n", tag)
	data, err := fs.ReadFile(images.ToolboxFiles, images.ToolboxDockerfile)
	if err != nil {
		return "", fmt.Errorf("reading bundled %s: %w", images.ToolboxDockerfile, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: images.ToolboxDockerfile, Mode: 0o644, Size: int64(len(data)),
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	if _, err := tw.Write(data); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if _, err := m.runBuild(ctx, &buf, build.ImageBuildOptions{
		Tags:       []string{tag},
		Dockerfile: images.ToolboxDockerfile,
		Labels:     map[string]string{LabelManaged: "true", LabelDockerfileHash: "sha256:" + images.ToolboxHash()},
	}, "", nil, p); err != nil {
		return "", err
	}
	return tag, nil
}
