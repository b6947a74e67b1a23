package doctor

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// builtImages holds the bundled images as sbx builds them from the embedded files.
func builtImages(t *testing.T) enginetest.ImageStore {
	store := enginetest.ImageStore{}
	for _, profile := range images.Profiles {
		tag, _ := images.TagFor(profile)
		hash, err := images.Hash(images.Files, profile)
		if err != nil {
			t.Fatal(err)
		}
		store[tag] = enginetest.Image("sha256:abc", 327_000_000, "", map[string]string{imagebuild.LabelDockerfileHash: hash})
	}
	return store
}

// noImages is the ImageInspect of an engine where nothing was built yet.
var noImages = enginetest.ImageStore{}.Inspect

func TestImageChecks(t *testing.T) {
	edited := enginetest.ImageFiles(t, map[string]string{"Dockerfile.sandbox-common": "RUN true\n"})

	tests := []struct {
		name    string
		inspect func(context.Context, string) (image.InspectResponse, error)
		files   fs.FS
		want    map[string]string // check name -> "status|detail part|fix"
	}{
		{name: "none built", inspect: noImages, want: map[string]string{
			"image sandbox": "warn|sbx-sandbox:bookworm-slim missing; built on first use|sbx image build sandbox",
			"image common":  "warn|missing; built on first use|sbx image build common",
			"image browser": "warn|missing; built on first use|sbx image build browser",
		}},
		{name: "all current", inspect: builtImages(t).Inspect, want: map[string]string{
			"image sandbox": "ok|sbx-sandbox:bookworm-slim, 327MB, current|",
			"image common":  "ok|current|",
			"image browser": "ok|current|",
		}},
		// The embedded Dockerfile of common changed (through the injected files) since the
		// images were built.
		{name: "common changed", inspect: builtImages(t).Inspect, files: edited, want: map[string]string{
			"image sandbox": "ok|current|",
			"image common":  "warn|sbx-sandbox-common:bookworm-slim stale: built from other Dockerfiles|sbx image build common",
			"image browser": "ok|current|",
		}},
		{name: "engine refuses", inspect: func(context.Context, string) (image.InspectResponse, error) {
			return image.InspectResponse{}, errors.New("permission denied")
		}, want: map[string]string{
			"images": "warn|permission denied|sbx image ls",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &enginetest.FakeEngine{T: t, ImageInspectFn: tt.inspect}
			checks := imageChecks(context.Background(), eng, tt.files)
			if len(checks) != len(tt.want) {
				t.Fatalf("%d checks, want %d: %+v", len(checks), len(tt.want), checks)
			}
			for name, want := range tt.want {
				parts := strings.SplitN(want, "|", 3)
				c := statusOf(checks, name)
				if c.Status != parts[0] || !strings.Contains(c.Detail, parts[1]) || !strings.Contains(c.Fix, parts[2]) || (parts[2] == "") != (c.Fix == "") || c.Required {
					t.Errorf("%s = %+v, want status %s, detail containing %q, fix %q", name, c, parts[0], parts[1], parts[2])
				}
			}
		})
	}
}
