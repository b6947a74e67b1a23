package imagebuild_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// editedFiles are the embedded files with Dockerfile.sandbox changed, as a newer sbx would
// embed them.
func editedFiles(t *testing.T) fs.FS {
	return enginetest.ImageFiles(t, map[string]string{"Dockerfile.sandbox": "# changed\n"})
}

// putBuilt stores the image of profile as sbx would have built it from the embedded files.
func putBuilt(t *testing.T, reg enginetest.ImageStore, profile, id string) {
	t.Helper()
	tag, _ := images.TagFor(profile)
	hash, err := images.Hash(images.Files, profile)
	if err != nil {
		t.Fatal(err)
	}
	reg[tag] = enginetest.Image(id, 123<<20, "2025-01-02T03:04:05.123456789Z", map[string]string{imagebuild.LabelDockerfileHash: hash})
}

// recorder collects what Images reports.
type recorder []imagebuild.Event

func (r *recorder) progress(ev imagebuild.Event) { *r = append(*r, ev) }

// notes is the text of the notes received.
func (r recorder) notes() string {
	var b strings.Builder
	for _, ev := range r {
		if n, ok := ev.(imagebuild.Note); ok {
			b.WriteString(n.Text)
		}
	}
	return b.String()
}

func TestImageStatus(t *testing.T) {
	reg := enginetest.ImageStore{}
	putBuilt(t, reg, images.ProfileSandbox, "sha256:aaa")
	putBuilt(t, reg, images.ProfileCommon, "sha256:bbb")
	reg[images.BrowserTag] = enginetest.Image("sha256:ccc", 0, "", nil)
	eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect}

	list, err := (&imagebuild.Images{Engine: eng}).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintln(list[0].State, list[1].State, list[2].State)
	if want := "present present stale\n"; got != want {
		t.Errorf("states = %s, want %s", got, want)
	}
	if s := list[0]; s.Profile != "sandbox" || s.Tag != images.SandboxTag || s.ID != "sha256:aaa" || s.Size != 123<<20 ||
		s.Created.Year() != 2025 || s.DockerfileHash == "" || s.ImageHash != s.DockerfileHash {
		t.Errorf("sandbox status = %+v", s)
	}
	if d := list[2].Detail; !strings.Contains(d, "no dev.sbx.dockerfile-hash label") {
		t.Errorf("detail of an image sbx did not build = %q", d)
	}

	// A changed Dockerfile.sandbox makes the sandbox image stale, and the two built on it.
	edited, err := (&imagebuild.Images{Engine: eng, Files: editedFiles(t)}).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range edited[:2] {
		if s.State != imagebuild.ImageStale || !strings.Contains(s.Detail, "other Dockerfiles") {
			t.Errorf("%s after editing Dockerfile.sandbox: %s (%s), want stale", s.Profile, s.State, s.Detail)
		}
	}

	delete(reg, images.CommonTag)
	st, err := (&imagebuild.Images{Engine: eng}).Status(context.Background(), images.ProfileCommon)
	if err != nil || st.State != imagebuild.ImageMissing || st.Size != 0 || st.DockerfileHash == "" {
		t.Errorf("status of a missing image = %+v, %v", st, err)
	}

	if _, err := (&imagebuild.Images{Engine: eng}).Status(context.Background(), "nope"); errs.ExitCode(err) != errs.CodeUsage {
		t.Errorf("unknown profile: err = %v, want a usage error", err)
	}

	broken := &enginetest.FakeEngine{T: t, ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) {
		return image.InspectResponse{}, errors.New("engine on fire")
	}}
	if _, err := (&imagebuild.Images{Engine: broken}).Status(context.Background(), "sandbox"); err == nil ||
		!strings.Contains(err.Error(), "inspecting image sbx-sandbox:bookworm-slim: engine on fire") {
		t.Errorf("inspect failure: err = %v", err)
	}
}

// buildCall is one ImageBuild a fake engine received.
type buildCall struct {
	opts  build.ImageBuildOptions
	files map[string]*tar.Header
	data  map[string]string
}

// builder fakes ImageBuild: it records the call, tags a new image labelled as asked, and
// answers with a short successful stream.
func builder(t *testing.T, reg enginetest.ImageStore, calls *[]buildCall) func(context.Context, io.Reader, build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	return func(_ context.Context, ctx io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error) {
		call := buildCall{opts: opts, files: map[string]*tar.Header{}, data: map[string]string{}}
		tr := tar.NewReader(ctx)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("reading the build context: %v", err)
			}
			data, _ := io.ReadAll(tr)
			call.files[hdr.Name], call.data[hdr.Name] = hdr, string(data)
		}
		*calls = append(*calls, call)
		id := fmt.Sprintf("sha256:new%d", len(*calls))
		reg[opts.Tags[0]] = enginetest.Image(id, 0, "", opts.Labels)
		stream := fmt.Sprintf(`{"stream":"Step 1/1 : FROM x\n"}`+"\n"+`{"aux":{"ID":%q}}`+"\n", id)
		return build.ImageBuildResponse{Body: io.NopCloser(strings.NewReader(stream))}, nil
	}
}

func TestBuild(t *testing.T) {
	reg := enginetest.ImageStore{}
	var calls []buildCall
	var removed []string
	eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect, ImageBuildFn: builder(t, reg, &calls),
		ImageRemoveFn: func(_ context.Context, id string, _ image.RemoveOptions) ([]image.DeleteResponse, error) {
			removed = append(removed, id)
			return nil, nil
		}}
	imgs := &imagebuild.Images{Engine: eng}
	var rec recorder

	// The browser image needs the sandbox image, which is missing: it is built first.
	res, err := imgs.Build(context.Background(), images.ProfileBrowser, imagebuild.BuildOptions{
		NoCache: true, Network: "host", Progress: rec.progress})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tag != images.BrowserTag || res.ID != "sha256:new2" || len(calls) != 2 {
		t.Fatalf("result %+v after %d builds", res, len(calls))
	}
	if !strings.Contains(rec.notes(), "sbx-sandbox-browser:bookworm-slim is built on sbx-sandbox:bookworm-slim, which is missing; building that first") {
		t.Errorf("progress does not say why the sandbox image is built:\n%s", rec.notes())
	}

	base, browser := calls[0], calls[1]
	if got := base.opts.Tags; len(got) != 1 || got[0] != images.SandboxTag {
		t.Errorf("first build tags %v, want the sandbox image", got)
	}
	if len(base.opts.BuildArgs) != 0 {
		t.Errorf("sandbox build args = %v, want none", base.opts.BuildArgs)
	}
	o := browser.opts
	sandboxHash, _ := images.Hash(images.Files, images.ProfileSandbox)
	browserHash, _ := images.Hash(images.Files, images.ProfileBrowser)
	checks := []struct {
		what      string
		got, want any
	}{
		{"tags", fmt.Sprint(o.Tags), "[" + images.BrowserTag + "]"},
		{"dockerfile", o.Dockerfile, "Dockerfile.sandbox-browser"},
		{"BASE_IMAGE", *o.BuildArgs["BASE_IMAGE"], images.SandboxTag},
		{"managed label", o.Labels[imagebuild.LabelManaged], "true"},
		{"profile label", o.Labels[imagebuild.LabelProfile], "browser"},
		{"hash label", o.Labels[imagebuild.LabelDockerfileHash], browserHash},
		{"sandbox hash label", base.opts.Labels[imagebuild.LabelDockerfileHash], sandboxHash},
		{"builder", o.Version, build.BuilderV1},
		{"network", o.NetworkMode, "host"},
		{"no cache", o.NoCache, true},
		{"remove intermediate containers", o.Remove && o.ForceRemove, true},
		{"pull", o.PullParent, false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}

	// The context holds exactly the profile's files, with their modes and embedded contents.
	if len(browser.files) != 2 {
		t.Errorf("browser context files: %v", browser.files)
	}
	for name, mode := range map[string]int64{"Dockerfile.sandbox-browser": 0o644, "sbx-browser-entrypoint.sh": 0o755} {
		hdr := browser.files[name]
		if hdr == nil {
			t.Errorf("context lacks %s", name)
			continue
		}
		want, _ := fs.ReadFile(images.Files, name)
		if hdr.Mode != mode || hdr.Uid != 0 || hdr.Gid != 0 || hdr.ModTime.Unix() != 0 || browser.data[name] != string(want) {
			t.Errorf("%s in the context: mode %o uid %d gid %d mtime %v, contents equal: %v", name, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime, browser.data[name] == string(want))
		}
	}
	if len(removed) != 0 {
		t.Errorf("removed %v after first builds", removed)
	}

	// A rebuild of a current base does not rebuild the base, and removes the image it replaces.
	calls = nil
	if _, err := imgs.Build(context.Background(), images.ProfileBrowser, imagebuild.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].opts.Tags[0] != images.BrowserTag || calls[0].opts.NoCache || calls[0].opts.NetworkMode != "" {
		t.Errorf("rebuild made %d builds: %+v", len(calls), calls)
	}
	if fmt.Sprint(removed) != "[sha256:new2]" {
		t.Errorf("removed %v, want the replaced browser image", removed)
	}
}

func TestBuildKeepsReplacedImagesInUse(t *testing.T) {
	reg := enginetest.ImageStore{}
	putBuilt(t, reg, images.ProfileSandbox, "sha256:old")
	var calls []buildCall
	var attempts []string
	inUse := true
	eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect, ImageBuildFn: builder(t, reg, &calls),
		ImageRemoveFn: func(_ context.Context, id string, _ image.RemoveOptions) ([]image.DeleteResponse, error) {
			attempts = append(attempts, id)
			if inUse {
				return nil, fmt.Errorf("conflict: image has dependent child images: %w", cerrdefs.ErrConflict)
			}
			return nil, nil
		}}
	imgs := &imagebuild.Images{Engine: eng}
	if _, err := imgs.Build(context.Background(), images.ProfileSandbox, imagebuild.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	inUse = false
	if _, err := imgs.Build(context.Background(), images.ProfileCommon, imagebuild.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(attempts) != "[sha256:old sha256:old]" {
		t.Errorf("removal attempts %v: the old sandbox image should be tried again after the next build", attempts)
	}
}

func TestBuildFailures(t *testing.T) {
	reg := enginetest.ImageStore{}
	putBuilt(t, reg, images.ProfileSandbox, "sha256:aaa")
	fail := `{"stream":"Step 1/2 : FROM x\n"}
{"stream":"Step 2/2 : RUN apt-get update\n"}
{"stream":"Err:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving 'deb.debian.org'\n"}
{"errorDetail":{"code":100,"message":"The command '/bin/sh -c apt-get update' returned a non-zero code: 100"},"error":"x"}
`
	eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect,
		ImageBuildFn: enginetest.AnswerBuild(fail)}
	var rec recorder
	_, err := (&imagebuild.Images{Engine: eng}).Build(context.Background(), images.ProfileCommon, imagebuild.BuildOptions{Progress: rec.progress})
	var be *imagebuild.BuildError
	if !errors.As(err, &be) || be.Step != 2 || be.Profile != "common" {
		t.Fatalf("err = %v, want a BuildError at step 2", err)
	}
	if h := errs.Hint(err); !strings.Contains(h, "--network host") {
		t.Errorf("hint = %q, want --network host suggested", h)
	}
	if last, ok := rec[len(rec)-1].(imagebuild.BuildFailed); !ok || last.Err != be {
		t.Errorf("last event = %#v, want the build's failure", rec[len(rec)-1])
	}
	if s := be.Summary(); !strings.Contains(s, "step 2/2 failed: RUN apt-get update\nlast 2 lines of its output:\n  Err:1") {
		t.Errorf("summary:\n%s", s)
	}

	refused := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect,
		ImageBuildFn: func(context.Context, io.Reader, build.ImageBuildOptions) (build.ImageBuildResponse, error) {
			return build.ImageBuildResponse{}, fmt.Errorf("network nope not found: %w", cerrdefs.ErrNotFound)
		}}
	_, err = (&imagebuild.Images{Engine: refused}).Build(context.Background(), images.ProfileSandbox, imagebuild.BuildOptions{Network: "nope"})
	if err == nil || errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(err.Error(), "building image sbx-sandbox:bookworm-slim: network nope not found") {
		t.Errorf("refused build: err = %v", err)
	}
}

func TestEnsure(t *testing.T) {
	t.Run("missing bundled image is built with progress", func(t *testing.T) {
		reg := enginetest.ImageStore{}
		var calls []buildCall
		eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect, ImageBuildFn: builder(t, reg, &calls)}
		var rec recorder
		st, err := (&imagebuild.Images{Engine: eng}).Ensure(context.Background(), images.SandboxTag, rec.progress)
		if err != nil || st.State != imagebuild.ImagePresent || len(calls) != 1 {
			t.Fatalf("status %+v, err %v, %d builds", st, err, len(calls))
		}
		if !strings.Contains(rec.notes(), "image sbx-sandbox:bookworm-slim is missing; building it") {
			t.Errorf("notes do not say why the image is built:\n%s", rec.notes())
		}
		if got := fmt.Sprintf("%T %v %T", rec[1], rec[3], rec[len(rec)-1]); got != "imagebuild.BuildStarted {1 1 FROM x} imagebuild.BuildDone" {
			t.Errorf("events %s, want the build started, its step and its end", got)
		}
	})
	t.Run("present image is used", func(t *testing.T) {
		reg := enginetest.ImageStore{}
		putBuilt(t, reg, images.ProfileSandbox, "sha256:aaa")
		eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect}
		var rec recorder
		st, err := (&imagebuild.Images{Engine: eng}).Ensure(context.Background(), images.SandboxTag, rec.progress)
		if err != nil || st.State != imagebuild.ImagePresent || len(rec) != 0 {
			t.Errorf("status %+v, err %v, events %v", st, err, rec)
		}
	})
	t.Run("stale image is reported, not rebuilt", func(t *testing.T) {
		reg := enginetest.ImageStore{}
		putBuilt(t, reg, images.ProfileSandbox, "sha256:aaa")
		eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect}
		var rec recorder
		imgs := &imagebuild.Images{Engine: eng, Files: editedFiles(t)}
		st, err := imgs.Ensure(context.Background(), images.SandboxTag, rec.progress)
		if err != nil || st.State != imagebuild.ImageStale {
			t.Fatalf("status %+v, err %v", st, err)
		}
		if n := rec.notes(); !strings.Contains(n, "warning: image sbx-sandbox:bookworm-slim is stale") || !strings.Contains(n, "sbx image build sandbox") {
			t.Errorf("warning:\n%s", n)
		}
	})
	t.Run("other images are pulled with the registry's credentials", func(t *testing.T) {
		reg := enginetest.ImageStore{"python:3": enginetest.Image("sha256:py", 0, "", nil)}
		var pulled []string
		eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect,
			ImagePullFn: func(_ context.Context, ref string, o image.PullOptions) (io.ReadCloser, error) {
				pulled = append(pulled, ref+" "+o.RegistryAuth)
				reg[ref] = enginetest.Image("sha256:new", 0, "", nil)
				return io.NopCloser(strings.NewReader(`{"status":"Pulling fs layer","id":"abc"}` + "\n" + `{"status":"Pull complete","id":"abc"}` + "\n")), nil
			}}
		auth := func(_ context.Context, registry string) (string, string, error) {
			return "creds-for-" + registry, "auths in x", nil
		}
		if st, err := (&imagebuild.Images{Engine: eng, Auth: auth}).Ensure(context.Background(), "python:3", nil); err != nil || st.State != imagebuild.ImagePresent || len(pulled) != 0 {
			t.Errorf("present image: %+v, %v, pulled %v", st, err, pulled)
		}
		var rec recorder
		st, err := (&imagebuild.Images{Engine: eng, Auth: auth}).Ensure(context.Background(), "127.0.0.1:5000/team/tool:1", rec.progress)
		if err != nil || st.ID != "sha256:new" || fmt.Sprint(pulled) != "[127.0.0.1:5000/team/tool:1 creds-for-127.0.0.1:5000]" {
			t.Fatalf("pull: %+v, %v, pulled %v", st, err, pulled)
		}
		if got := fmt.Sprintf("%T %T %T %T", rec[0], rec[1], rec[2], rec[len(rec)-1]); got != "imagebuild.PullStarted imagebuild.Message imagebuild.Message imagebuild.PullDone" {
			t.Errorf("events %s", got)
		}
	})
	for _, tt := range []struct {
		name, apiErr, stream, says, hint string
	}{
		{name: "wrong password", apiErr: "Head \"http://127.0.0.1:5000/v2/x/manifests/1\": unauthorized: authentication required",
			says: "pulling image 127.0.0.1:5000/x:1 from registry 127.0.0.1:5000: the registry refused the credentials from auths in x", hint: "docker login 127.0.0.1:5000"},
		{name: "not found", stream: `{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}`,
			says: "the registry has no such image", hint: "check the name and tag"},
		{name: "unreachable", apiErr: "Get \"http://127.0.0.1:5000/v2/\": dial tcp 127.0.0.1:5000: connect: connection refused",
			says: "the engine cannot reach the registry", hint: "check that 127.0.0.1:5000 is up"},
	} {
		t.Run("a failed pull names the registry: "+tt.name, func(t *testing.T) {
			eng := &enginetest.FakeEngine{T: t, ImageInspectFn: enginetest.ImageStore{}.Inspect,
				ImagePullFn: func(context.Context, string, image.PullOptions) (io.ReadCloser, error) {
					if tt.apiErr != "" {
						return nil, errors.New(tt.apiErr)
					}
					return io.NopCloser(strings.NewReader(tt.stream)), nil
				}}
			auth := func(context.Context, string) (string, string, error) { return "x", "auths in x", nil }
			_, err := (&imagebuild.Images{Engine: eng, Auth: auth}).Ensure(context.Background(), "127.0.0.1:5000/x:1", nil)
			if err == nil || !strings.Contains(err.Error(), tt.says) || !strings.Contains(errs.Hint(err), tt.hint) || errs.ExitCode(err) != errs.CodeFailure {
				t.Errorf("err = %v, hint %q", err, errs.Hint(err))
			}
		})
	}
}
