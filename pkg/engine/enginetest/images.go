package enginetest

import (
	"context"
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/images"
)

// ImageFiles copies the embedded image files into a file system a test can change, with
// text appended to each file named in appends, as a newer sbx would embed them.
func ImageFiles(t testing.TB, appends map[string]string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fs.WalkDir(images.Files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(images.Files, path)
		m[path] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range appends {
		f, ok := m[name]
		if !ok {
			t.Fatalf("ImageFiles: no embedded file %s", name)
		}
		f.Data = append(f.Data, text...)
	}
	return m
}

// ImageStore is a fake engine's images by reference; its Inspect serves as ImageInspectFn.
type ImageStore map[string]image.InspectResponse

// Inspect returns the image ref, or the engine's not-found error.
func (s ImageStore) Inspect(_ context.Context, ref string) (image.InspectResponse, error) {
	if img, ok := s[ref]; ok {
		return img, nil
	}
	return image.InspectResponse{}, fmt.Errorf("no such image: %s: %w", ref, cerrdefs.ErrNotFound)
}

// Image is an image as the engine inspects it, with labels.
func Image(id string, size int64, created string, labels map[string]string) image.InspectResponse {
	return image.InspectResponse{ID: id, Size: size, Created: created,
		Config: &dockerspec.DockerOCIImageConfig{ImageConfig: ocispec.ImageConfig{Labels: labels}}}
}
