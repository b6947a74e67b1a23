package image

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

var now = time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)

func factory(ios *iostreams.IOStreams, eng engine.Engine) *cmdutil.Factory {
	return &cmdutil.Factory{
		IOStreams: ios,
		Global:    &cmdutil.GlobalOptions{},
		Now:       func() time.Time { return now },
		Engine:    func(context.Context) (engine.Engine, error) { return eng, nil },
	}
}

func TestBuildFlags(t *testing.T) {
	tests := []struct {
		args     string
		profiles string
		noCache  bool
		network  string
		progress string
		usageErr string
	}{
		{args: "", profiles: "[sandbox]", progress: "auto"},
		{args: "all", profiles: "[sandbox common browser]", progress: "auto"},
		{args: "browser sandbox browser", profiles: "[sandbox browser]", progress: "auto"},
		{args: "common --no-cache --network host --progress plain", profiles: "[common]", noCache: true, network: "host", progress: "plain"},
		{args: "--progress json browser", profiles: "[browser]", progress: "json"},
		{args: "chrome", usageErr: `unknown profile "chrome"`},
		{args: "--progress tty", usageErr: `invalid --progress "tty"`},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			var got *BuildOptions
			cmd := NewCmdBuild(factory(ios, nil), func(_ context.Context, o *BuildOptions) error { got = o; return nil })
			cmd.SetArgs(strings.Fields(tt.args))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if tt.usageErr != "" {
				if err == nil || errs.ExitCode(err) != errs.CodeUsage || !strings.Contains(err.Error(), tt.usageErr) || errs.Hint(err) == "" {
					t.Fatalf("err = %v, want a usage error with a hint containing %q", err, tt.usageErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got.Profiles) != tt.profiles || got.NoCache != tt.noCache || got.Network != tt.network || got.Progress != tt.progress {
				t.Errorf("options = %+v", got)
			}
		})
	}
}

// fakeEngine holds images by tag and builds new ones, labelled as asked.
func fakeEngine(t *testing.T, tags enginetest.ImageStore, builds *[]string) *enginetest.FakeEngine {
	return &enginetest.FakeEngine{T: t,
		ImageInspectFn: tags.Inspect,
		ImageBuildFn: func(_ context.Context, _ io.Reader, o build.ImageBuildOptions) (build.ImageBuildResponse, error) {
			*builds = append(*builds, o.Tags[0])
			id := fmt.Sprintf("sha256:%064d", len(*builds))
			tags[o.Tags[0]] = labelled(id, o.Labels[imagebuild.LabelDockerfileHash], 0)
			stream := `{"stream":"Step 1/1 : FROM base\n"}` + "\n" + fmt.Sprintf(`{"aux":{"ID":%q}}`, id) + "\n"
			return build.ImageBuildResponse{Body: io.NopCloser(strings.NewReader(stream))}, nil
		},
	}
}

func labelled(id, hash string, size int64) image.InspectResponse {
	return enginetest.Image(id, size, now.Add(-50*time.Hour).Format(time.RFC3339Nano), map[string]string{imagebuild.LabelDockerfileHash: hash})
}

func TestBuildRun(t *testing.T) {
	ios, _, out, errOut := iostreams.Test()
	var builds []string
	eng := fakeEngine(t, enginetest.ImageStore{}, &builds)
	err := buildRun(context.Background(), &BuildOptions{IO: ios, Engine: factory(ios, eng).Engine,
		Profiles: []string{"sandbox", "common", "browser"}, Progress: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[" + images.SandboxTag + " " + images.CommonTag + " " + images.BrowserTag + "]"; fmt.Sprint(builds) != want {
		t.Errorf("built %v, want %s once each", builds, want)
	}
	if out.Len() != 0 {
		t.Errorf("stdout = %q, want nothing", out.String())
	}
	if got := errOut.String(); strings.Count(got, "\nbuilt ") != 3 || !strings.Contains(got, "building sbx-sandbox-common:bookworm-slim (profile common)\n[1/1] FROM base\n") {
		t.Errorf("stderr:\n%s", got)
	}

	ios, _, _, errOut = iostreams.Test()
	ios.SetQuiet(true)
	builds = nil
	if err := buildRun(context.Background(), &BuildOptions{IO: ios, Engine: factory(ios, eng).Engine, Profiles: []string{"sandbox"}, Progress: "plain"}); err != nil {
		t.Fatal(err)
	}
	if errOut.Len() != 0 || len(builds) != 1 {
		t.Errorf("quiet build: %d builds, stderr %q", len(builds), errOut.String())
	}
}

func TestBuildRunEngineDown(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	down := errs.Failure(fmt.Errorf("cannot reach the Docker engine"), "start Docker")
	err := buildRun(context.Background(), &BuildOptions{IO: ios, Profiles: []string{"sandbox"},
		Engine: func(context.Context) (engine.Engine, error) { return nil, down }})
	if err != down {
		t.Errorf("err = %v, want the engine's error unchanged", err)
	}
}

// engineWithImages has the sandbox image current, the common image built from an older
// Dockerfile, and no browser image.
func engineWithImages(t *testing.T) *enginetest.FakeEngine {
	sandboxHash, _ := images.Hash(images.Files, images.ProfileSandbox)
	tags := enginetest.ImageStore{
		images.SandboxTag: labelled("sha256:1111111111112222222222", sandboxHash, 327_000_000),
		images.CommonTag:  labelled("sha256:3333333333334444444444", "sha256:old", 1_850_000_000),
	}
	eng := fakeEngine(t, tags, new([]string))
	eng.ImageListFn = func(_ context.Context, o image.ListOptions) ([]image.Summary, error) {
		if got := o.Filters.Get("label"); fmt.Sprint(got) != "[dev.sbx.setup-hash]" {
			t.Errorf("ImageList filters %v, want the derived images' label", got)
		}
		return []image.Summary{derivedSummary}, nil
	}
	return eng
}

// derivedSummary is an image derived for setup, as the engine lists it.
var derivedSummary = image.Summary{ID: "sha256:5555555555556666666666", RepoTags: []string{"sbx-derived:0123456789abcdef0123"},
	Size: 340_000_000, Created: now.Add(-time.Hour).Unix(),
	Labels: map[string]string{imagebuild.LabelManaged: "true", imagebuild.LabelSetupHash: "0123456789abcdef0123",
		imagebuild.LabelDerivedFrom: "sbx-sandbox:bookworm-slim", imagebuild.LabelBaseID: "sha256:1111111111112222222222",
		imagebuild.LabelSetup: `{"apt":["bc"],"npm":[],"pip":[],"run":["echo hi"]}`}}

func runLs(t *testing.T, tty bool, json bool, files fs.FS) (string, string) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	ios.SetTTY(tty)
	f := factory(ios, engineWithImages(t))
	err := lsRun(context.Background(), &LsOptions{IO: ios, Engine: f.Engine, Now: f.Now, JSON: json, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String()
}

func TestLsTable(t *testing.T) {
	out, errOut := runLs(t, true, false, nil)
	want := `PROFILE  TAG                               STATUS   SIZE    CREATED      IMAGE ID
sandbox  sbx-sandbox:bookworm-slim         present  327MB   2 days ago   111111111111
common   sbx-sandbox-common:bookworm-slim  stale    1.85GB  2 days ago   333333333333
browser  sbx-sandbox-browser:bookworm-slim missing  -       -            -
setup    sbx-derived:0123456789abcdef0123  present  340MB   About an hour ago   555555555555
`
	if norm(out) != norm(want) {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
	for _, w := range []string{"common is stale: built from other Dockerfiles than this sbx bundles; rebuild it with: sbx image build common",
		"sbx-derived:0123456789abcdef0123: setup of sbx-sandbox:bookworm-slim: apt bc; 1 command(s)",
		"browser is missing: its first sandbox builds it, or build it now with: sbx image build browser"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
}

// norm collapses runs of spaces, so the test does not pin the table's padding.
func norm(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

func TestLsPiped(t *testing.T) {
	out, errOut := runLs(t, false, false, nil)
	want := "sandbox\tsbx-sandbox:bookworm-slim\tpresent\t327000000\t2025-03-02T10:00:00Z\tsha256:1111111111112222222222\n" +
		"common\tsbx-sandbox-common:bookworm-slim\tstale\t1850000000\t2025-03-02T10:00:00Z\tsha256:3333333333334444444444\n" +
		"browser\tsbx-sandbox-browser:bookworm-slim\tmissing\t0\t\t\n" +
		"setup\tsbx-derived:0123456789abcdef0123\tpresent\t340000000\t2025-03-04T11:00:00Z\tsha256:5555555555556666666666\tsbx-sandbox:bookworm-slim\n"
	if out != want {
		t.Errorf("TSV:\n%q\nwant:\n%q", out, want)
	}
	if errOut != "" {
		t.Errorf("stderr = %q, want nothing when piped", errOut)
	}
}

func TestLsJSON(t *testing.T) {
	out, _ := runLs(t, true, true, nil)
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(list) != 4 || list[3]["profile"] != "" || list[3]["from"] != "sbx-sandbox:bookworm-slim" || fmt.Sprint(list[3]["setup"]) != "map[apt:[bc] npm:[] pip:[] run:[echo hi]]" ||
		list[0]["profile"] != "sandbox" || list[0]["status"] != "present" || list[0]["size"] != 327e6 ||
		list[0]["created"] != "2025-03-02T10:00:00Z" || list[1]["status"] != "stale" || list[1]["imageHash"] != "sha256:old" ||
		list[2]["status"] != "missing" || list[2]["dockerfileHash"] == "" {
		t.Errorf("JSON:\n%s", out)
	}
	if _, ok := list[2]["created"]; ok {
		t.Errorf("a missing image has a creation time:\n%s", out)
	}
}

// A changed Dockerfile (here through the injected file system) makes the image stale.
func TestLsStaleAfterDockerfileChange(t *testing.T) {
	m := enginetest.ImageFiles(t, map[string]string{"Dockerfile.sandbox": "RUN true\n"})
	out, _ := runLs(t, false, false, m)
	if !strings.HasPrefix(out, "sandbox\tsbx-sandbox:bookworm-slim\tstale\t") {
		t.Errorf("after changing Dockerfile.sandbox:\n%s", out)
	}
}

func TestNewCmdImage(t *testing.T) {
	ios, _, out, _ := iostreams.Test()
	cmd := NewCmdImage(factory(ios, nil))
	cmd.SetOut(out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"build", "ls", "sbx-sandbox-common:bookworm-slim"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help lacks %q", w)
		}
	}
	var buf bytes.Buffer
	ls := NewCmdLs(factory(ios, nil), func(_ context.Context, o *LsOptions) error { fmt.Fprint(&buf, o.JSON); return nil })
	ls.SetArgs([]string{"--json"})
	if err := ls.Execute(); err != nil || buf.String() != "true" {
		t.Errorf("ls --json: %v, JSON=%s", err, buf.String())
	}
}

// Prune removes the derived images the engine lets go and keeps those a container uses,
// with the engine's reason; nothing but derived images is asked for.
func TestPrune(t *testing.T) {
	used := derivedSummary
	used.ID, used.RepoTags = "sha256:7777777777778888888888", []string{"sbx-derived:aaaaaaaaaaaaaaaaaaaa"}
	used.Labels = maps.Clone(used.Labels)
	used.Labels[imagebuild.LabelSetupHash] = "aaaaaaaaaaaaaaaaaaaa"
	// An image anyone built may carry sbx's labels; without its sbx-derived tag it is not sbx's.
	impostor := derivedSummary
	impostor.ID, impostor.RepoTags = "sha256:9999999999990000000000", []string{"team/tool:1"}
	var removed []string
	eng := &enginetest.FakeEngine{T: t,
		ImageListFn: func(context.Context, image.ListOptions) ([]image.Summary, error) {
			return []image.Summary{derivedSummary, used, impostor}, nil
		},
		ImageRemoveFn: func(_ context.Context, id string, _ image.RemoveOptions) ([]image.DeleteResponse, error) {
			removed = append(removed, id)
			if id == used.ID {
				return nil, cerrdefs.ErrConflict.WithMessage("unable to delete 777777777777 (must be forced) - image is being used by stopped container 42")
			}
			return nil, nil
		}}
	ios, _, out, errOut := iostreams.Test()
	if err := pruneRun(context.Background(), &PruneOptions{IO: ios, Engine: factory(ios, eng).Engine}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "removed sbx-derived:0123456789abcdef0123 (setup of sbx-sandbox:bookworm-slim)\n" || len(removed) != 2 {
		t.Errorf("stdout %q, removed %v", out, removed)
	}
	if !strings.Contains(errOut.String(), "kept sbx-derived:aaaaaaaaaaaaaaaaaaaa: unable to delete 777777777777 (must be forced) - image is being used by stopped container 42") ||
		!strings.Contains(errOut.String(), "2 derived image(s) checked, 340MB freed") {
		t.Errorf("stderr:\n%s", errOut)
	}
	ios, _, out, _ = iostreams.Test()
	if err := pruneRun(context.Background(), &PruneOptions{IO: ios, Engine: factory(ios, eng).Engine, JSON: true}); err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal(out.Bytes(), &list); err != nil || len(list) != 2 || list[0]["removed"] != true || list[1]["removed"] != false || list[1]["reason"] == "" {
		t.Errorf("JSON (%v):\n%s", err, out)
	}
}
