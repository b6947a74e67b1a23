package imagebuild_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/build"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

func TestDerivedTag(t *testing.T) {
	s := config.Setup{Apt: []string{"bc"}}
	tag := imagebuild.DerivedTag("sha256:aaa", s)
	if !strings.HasPrefix(tag, "sbx-derived:") || len(tag) != len("sbx-derived:")+20 || imagebuild.DerivedTag("sha256:aaa", config.Setup{Apt: []string{"bc"}}) != tag {
		t.Fatalf("tag %q is not stable", tag)
	}
	for name, other := range map[string]string{
		"another base":           imagebuild.DerivedTag("sha256:bbb", s),
		"another package":        imagebuild.DerivedTag("sha256:aaa", config.Setup{Apt: []string{"dc"}}),
		"a package as a command": imagebuild.DerivedTag("sha256:aaa", config.Setup{Run: []string{"bc"}}),
	} {
		if other == tag {
			t.Errorf("%s gives the same tag", name)
		}
	}
}

// tarFiles reads a build context into name -> content.
func tarFiles(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out[h.Name] = string(data)
	}
}

func TestDerive(t *testing.T) {
	setup := config.Setup{Apt: []string{"bc", "dc"}, Pip: []string{"requests"}, Run: []string{"echo one", "echo two"}}
	tag := imagebuild.DerivedTag("sha256:base", setup)
	reg := enginetest.ImageStore{}
	var builds []build.ImageBuildOptions
	var files map[string]string
	eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect,
		ImageBuildFn: func(_ context.Context, ctx io.Reader, o build.ImageBuildOptions) (build.ImageBuildResponse, error) {
			builds = append(builds, o)
			files = tarFiles(t, ctx)
			reg[o.Tags[0]] = enginetest.Image("sha256:derived", 0, "", o.Labels)
			stream := `{"stream":"Step 1/2 : ARG BASE\n"}` + "\n" + `{"stream":"Step 2/2 : RUN x\n"}` + "\n" + `{"aux":{"ID":"sha256:derived"}}` + "\n"
			return build.ImageBuildResponse{Body: io.NopCloser(strings.NewReader(stream))}, nil
		}}
	var rec recorder
	in := imagebuild.DeriveInput{Base: "sbx-sandbox:bookworm-slim", BaseID: "sha256:base", Setup: setup, CACerts: []byte("PEM"),
		Network: "sbx-setup-x-egress", Proxy: "http://10.213.0.2:3128", Progress: rec.progress}
	got, err := (&imagebuild.Images{Engine: eng}).Derive(context.Background(), in)
	if err != nil || got != tag || len(builds) != 1 {
		t.Fatalf("Derive = %q, %v after %d builds; want %s", got, err, len(builds), tag)
	}
	o := builds[0]
	if o.Dockerfile != "Dockerfile.setup" || *o.BuildArgs["BASE"] != "sha256:base" || *o.BuildArgs["BASE_USER"] != "0" ||
		*o.BuildArgs["https_proxy"] != in.Proxy || *o.BuildArgs["HTTP_PROXY"] != in.Proxy || o.NetworkMode != in.Network || o.Version != build.BuilderV1 {
		t.Errorf("build options %+v", o)
	}
	if o.Labels[imagebuild.LabelDerivedFrom] != in.Base || o.Labels[imagebuild.LabelBaseID] != "sha256:base" ||
		"sbx-derived:"+o.Labels[imagebuild.LabelSetupHash] != tag || o.Labels[imagebuild.LabelSetup] != `{"apt":["bc","dc"],"npm":null,"pip":["requests"],"run":["echo one","echo two"]}` {
		t.Errorf("labels %v", o.Labels)
	}
	if files["apt.txt"] != "bc\ndc\n" || files["pip.txt"] != "requests\n" || files["npm.txt"] != "" || files["run.sh"] != "echo one\necho two\n" ||
		files["ca.pem"] != "PEM" || !strings.Contains(files["sbx-setup.sh"], "apt-get install") || !strings.Contains(files["Dockerfile.setup"], "FROM ${BASE}") {
		t.Errorf("build context %v", files)
	}
	if n := rec.notes(); !strings.Contains(n, "building "+tag+": the setup of sbx-sandbox:bookworm-slim") {
		t.Errorf("notes %q", n)
	}
	// Present: nothing is built.
	if got, err := (&imagebuild.Images{Engine: eng}).Derive(context.Background(), in); err != nil || got != tag || len(builds) != 1 {
		t.Errorf("second Derive = %q, %v after %d builds", got, err, len(builds))
	}
}

func TestDeriveFailureHint(t *testing.T) {
	stream := `{"stream":"Step 1/1 : RUN x\n"}` + "\n" + `{"stream":"Err:1 http://deb.debian.org/debian bookworm InRelease\n  Could not resolve 'deb.debian.org'\n"}` + "\n" +
		`{"errorDetail":{"message":"The command '/bin/sh' returned a non-zero code: 100"},"error":"x"}` + "\n"
	eng := &enginetest.FakeEngine{T: t, ImageInspectFn: enginetest.ImageStore{}.Inspect, ImageBuildFn: enginetest.AnswerBuild(stream)}
	_, err := (&imagebuild.Images{Engine: eng}).Derive(context.Background(), imagebuild.DeriveInput{Base: "b", BaseID: "sha256:b", Setup: config.Setup{Apt: []string{"bc"}}})
	var be *imagebuild.BuildError
	if !errors.As(err, &be) || !strings.Contains(be.Hint(), "add the destinations it needs to egress") || !strings.Contains(err.Error(), "exit status 100") {
		t.Errorf("err %v (%s)", err, fmt.Sprint(be))
	}
}
