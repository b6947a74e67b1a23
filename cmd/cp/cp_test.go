package cp

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/archive"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/transfer"
)

func TestNewCmdCpFlags(t *testing.T) {
	// Errors of sbx's own checks are usage errors; cobra's ("accepts 2 arg") become one in Main.
	cmdtest.Flags(t, NewCmdCp, []cmdtest.FlagCase[CpOptions]{
		{Args: []string{"a.txt", "web:/tmp/"}, Check: func(o *CpOptions) bool {
			return o.Args.Into() && o.Args.Dst.Sandbox == "web" && o.Args.Dst.Path == "/tmp" && o.Args.Dst.TrailingSlash &&
				o.MaxBytes == archive.DefaultMaxBytes && o.MaxEntries == archive.DefaultMaxEntries && o.MaxDepth == archive.DefaultMaxDepth
		}},
		{Args: []string{"-a", "-L", "--json", "dir/.", ":src"}, Check: func(o *CpOptions) bool {
			return o.Archive && o.FollowLink && o.JSON && o.Args.Src.Contents && o.Args.Dst.Default && o.Args.Dst.Path == "/workspace/src"
		}},
		{Args: []string{"--max-bytes", "2g", "--max-entries", "5", "--max-depth=3", ":out", "."}, Check: func(o *CpOptions) bool {
			return !o.Args.Into() && o.MaxBytes == 2<<30 && o.MaxEntries == 5 && o.MaxDepth == 3
		}},
		{Args: []string{":out", "-"}, Check: func(o *CpOptions) bool { return o.Args.Dst.Stream }},
		{Args: []string{"a"}, WantErr: "accepts 2 arg"},
		{Args: []string{"a", "b"}, WantErr: "one of SRC and DST must be a sandbox path", Code: errs.CodeUsage},
		{Args: []string{"x:/a", "y:/b"}, WantErr: "cannot copy from one sandbox to another", Code: errs.CodeUsage},
		{Args: []string{"a", "Web:/tmp"}, WantErr: "invalid sandbox name", Code: errs.CodeUsage},
		{Args: []string{"--max-bytes", "1g", "a", ":/tmp"}, WantErr: "--max-bytes caps copies out", Code: errs.CodeUsage},
		{Args: []string{"-a", ":/tmp/x", "x"}, WantErr: "-a/--archive keeps owners on copies into", Code: errs.CodeUsage},
		{Args: []string{"--json", ":/tmp/x", "-"}, WantErr: "--json cannot share stdout", Code: errs.CodeUsage},
		{Args: []string{"--max-bytes", "lots", ":/tmp/x", "x"}, WantErr: "bad --max-bytes", Code: errs.CodeUsage},
		{Args: []string{"--max-depth", "0", ":/tmp/x", "x"}, WantErr: "must be positive", Code: errs.CodeUsage},
	})
}

func parse(t *testing.T, src, dst string) archive.CopyArgs {
	t.Helper()
	a, err := archive.ParseCopyArgs(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestCpRunRefusesBeforeDialling(t *testing.T) {
	for _, tt := range []struct {
		name     string
		src, dst string
		env      map[string]string
		tty      bool
		want     string
		wantCode int
	}{
		{name: "write denied", src: "f", dst: ":/tmp/", want: `"write"`, wantCode: errs.CodeFailure},
		{name: "read allowed, missing host parent", src: ":/tmp/x", dst: "no/such/x", want: "does not exist", wantCode: errs.CodeError},
		{name: "mode off", src: ":/tmp/x", dst: "x", env: map[string]string{"SBX_MODE": "off"}, want: "runs commands on the host", wantCode: errs.CodeError},
		{name: "tar to a terminal", src: ":/tmp/x", dst: "-", tty: true, want: "stdout, which is a terminal", wantCode: errs.CodeUsage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// No engine: these checks must come first.
			e := cmdtest.NewEnv(t, nil)
			e.WriteProject(t, "tools:\n  deny: [write]\n", false)
			if err := os.WriteFile(filepath.Join(e.Project, "f"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			maps.Copy(e.Vars, tt.env)
			e.IO.SetTTY(tt.tty)
			err := cpRun(context.Background(), &CpOptions{IO: e.IO, Factory: e.F, Args: parse(t, tt.src, tt.dst)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if got := errs.ExitCode(err); got != tt.wantCode {
				t.Errorf("exit %d, want %d", got, tt.wantCode)
			}
		})
	}
}

func TestCheckHostSide(t *testing.T) {
	wd := t.TempDir()
	if err := os.WriteFile(filepath.Join(wd, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), wd, time.Now(), nil)
	opts := &CpOptions{IO: ios, Factory: f}
	for _, tt := range []struct {
		arg     string
		into    bool
		want    string
		wantErr string
	}{
		{arg: "file", into: true, want: filepath.Join(wd, "file")},
		{arg: "file/", into: true, wantErr: "not a directory"},
		{arg: "nope", into: true, wantErr: "no such file"},
		{arg: ".", into: true, want: wd},
		{arg: "out", want: filepath.Join(wd, "out")},
		{arg: "out/", want: filepath.Join(wd, "out") + "/"},
		{arg: "./.", want: wd + "/."},
		{arg: "a/b", wantErr: "does not exist"},
	} {
		a := parse(t, tt.arg, ":/x")
		host := a.Src
		got, err := checkHostSide(opts, host, tt.into, nil)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s (into %v): err = %v, want %q", tt.arg, tt.into, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("%s (into %v): %q, %v; want %q", tt.arg, tt.into, got, err, tt.want)
		}
	}
}

func resolved(t *testing.T, projectFile string) *config.Resolved {
	t.Helper()
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, config.ProjectFileName), []byte(projectFile), 0o644); err != nil {
		t.Fatal(err)
	}
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), project, time.Now(), nil)
	if err := cmdutil.TrustFile(f, filepath.Join(project, config.ProjectFileName)); err != nil {
		t.Fatal(err)
	}
	r, err := cmdutil.ResolveConfig(f, "")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestExplainReadOnly(t *testing.T) {
	ro := &sandbox.Sandbox{Name: "box", Labels: map[string]string{sandbox.LabelWorkspace: "ro"}}
	rw := &sandbox.Sandbox{Name: "box", Labels: map[string]string{sandbox.LabelWorkspace: "rw"}}
	roErr := func(mount string) error {
		return &transfer.Error{Kind: transfer.ReadOnly, Sandbox: "box", Path: "/x", Mount: mount}
	}
	for _, tt := range []struct {
		name         string
		file         string
		sb           *sandbox.Sandbox
		err          error
		want, wantHi []string
	}{
		{name: "ro workspace with its source", file: "workspace: ro\n", sb: ro, err: roErr("/workspace"),
			want:   []string{"/workspace is the project directory mounted read-only", "workspace: ro, from project:", ".sbx.yaml:1"},
			wantHi: []string{"/tmp", "project on the host", "workspace: rw", "sbx create --replace"}},
		{name: "ro workspace, config changed since", file: "workspace: rw\n", sb: ro, err: roErr("/workspace"),
			want: []string{"created with workspace: ro", "now says rw, from project:"}},
		{name: "read-only root", file: "workspace: rw\n", sb: rw, err: roErr("/"),
			want:   []string{"root file system is read-only (readOnlyRoot: true, from default)"},
			wantHi: []string{"/tmp", "/workspace"}},
		{name: "other errors pass through", file: "", sb: rw, err: &transfer.Error{Kind: transfer.Missing, Sandbox: "box", Path: "/x"},
			want: []string{"box:/x does not exist"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := resolved(t, tt.file)
			err := explainCopyError(tt.err, r, tt.sb)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, w := range tt.wantHi {
				if !strings.Contains(errs.Hint(err), w) {
					t.Errorf("hint %q lacks %q", errs.Hint(err), w)
				}
			}
			if tt.err.(*transfer.Error).Kind == transfer.ReadOnly && errs.ExitCode(err) != errs.CodeError {
				t.Errorf("exit %d", errs.ExitCode(err))
			}
		})
	}
}

func TestReportJSONAndSummary(t *testing.T) {
	ios, _, out, errOut := iostreams.Test()
	opts := &CpOptions{IO: ios, JSON: true}
	res := &transfer.Result{Stats: archive.Stats{Files: 2000, Dirs: 3, Bytes: 5 << 20}, Duration: 1500 * time.Millisecond}
	box := archive.Location{Sandbox: "box", Path: "/tmp/t"}
	if err := report(opts, "box", false, box, "", res); err != nil {
		t.Fatal(err)
	}
	want := `{
  "direction": "out",
  "sandbox": "box",
  "src": "/tmp/t",
  "dst": "-",
  "files": 2000,
  "dirs": 3,
  "symlinks": 0,
  "bytes": 5242880,
  "durationMs": 1500
}
`
	if out.String() != want || errOut.Len() != 0 {
		t.Errorf("stdout %s stderr %q", out, errOut)
	}
	out.Reset()
	opts.JSON = false
	if err := report(opts, "box", true, box, "/h/t", res); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || errOut.String() != "copied 2000 files, 3 dirs (5.0 MiB) to box:/tmp/t in 1.5s\n" {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
}

func TestProgressLine(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &progressBar{label: "→ box:/tmp/data", start: start}
	p.stats = archive.Stats{Files: 12, Bytes: 30 << 20}
	if got := p.line(start.Add(3 * time.Second)); got != "→ box:/tmp/data  30.0 MiB  12 files  10.0 MiB/s" {
		t.Errorf("without totals: %q", got)
	}
	p.totalBytes, p.totalFiles = 60<<20, 40
	if got := p.line(start.Add(3 * time.Second)); got != "→ box:/tmp/data  [##########----------]  50%  30.0 MiB/60.0 MiB  12/40 files  10.0 MiB/s" {
		t.Errorf("with totals: %q", got)
	}
	var nilBar *progressBar
	nilBar.update(archive.Stats{})
	nilBar.finish()
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 100 << 20: "100.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
}

// A running sandbox is used as it is, even with a changed configuration: recreating it would
// lose the tmpfs files a copy out may be after. The change is reported.
func TestEnsureSandboxKeepsARunningOne(t *testing.T) {
	project := t.TempDir()
	ios, _, _, errOut := iostreams.Test()
	fake := &enginetest.FakeEngine{T: t,
		ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) {
			return container.InspectResponse{
				ContainerJSONBase: &container.ContainerJSONBase{ID: "c1", State: &container.State{Status: container.StateRunning}},
				Config: &container.Config{Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: strings.TrimPrefix(id, "sbx-"),
					sandbox.LabelProject: project, sandbox.LabelConfigHash: "old", sandbox.LabelConfig: `{"memory":1}`}},
			}, nil
		},
	}
	f := cmdutil.TestFactory(ios, map[string]string{"XDG_STATE_HOME": t.TempDir()}, t.TempDir(), project, time.Now(), fake)
	r, err := cmdutil.ResolveConfig(f, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := cmdutil.Manager(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	sb, release, err := ensureSandbox(context.Background(), &CpOptions{IO: ios, Factory: f}, m, r)
	if err != nil || sb.ID != "c1" {
		t.Fatalf("sandbox %+v, err %v", sb, err)
	}
	release()
	if !strings.Contains(errOut.String(), "runs with an older configuration") || !strings.Contains(errOut.String(), "memory") {
		t.Errorf("stderr %q", errOut)
	}
}

// A copy that names a sandbox needs one that exists: "no-such" is a typo, not a request for
// a new sandbox. Both directions fail with "not found" (exit 1) and create nothing.
func TestCpNamedSandboxMustExist(t *testing.T) {
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "h"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][2]string{{"no-such:/etc/hostname", "h2"}, {"h", "no-such:/tmp/"}} {
		t.Run(args[0]+" "+args[1], func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			creates := 0
			fake := &enginetest.FakeEngine{T: t,
				ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
					return container.InspectResponse{}, cerrdefs.ErrNotFound.WithMessage("No such container")
				},
				ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) {
					return image.InspectResponse{Config: &dockerspec.DockerOCIImageConfig{}}, nil
				},
				ContainerCreateFn: func(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
					creates++
					return container.CreateResponse{}, errors.New("the test refuses every create")
				},
			}
			f := cmdutil.TestFactory(ios, map[string]string{"XDG_STATE_HOME": t.TempDir()}, t.TempDir(), project, time.Now(), fake)
			err := cpRun(context.Background(), &CpOptions{IO: ios, Factory: f, Args: parse(t, args[0], args[1]),
				MaxBytes: archive.DefaultMaxBytes, MaxEntries: archive.DefaultMaxEntries, MaxDepth: archive.DefaultMaxDepth})
			if creates != 0 {
				t.Errorf("%d create calls", creates)
			}
			if err == nil || err.Error() != `sandbox "no-such" not found` || errs.ExitCode(err) != errs.CodeError ||
				!strings.Contains(errs.Hint(err), "sbx create -n no-such") {
				t.Errorf("err %v, exit %d, hint %q", err, errs.ExitCode(err), errs.Hint(err))
			}
			if _, err := os.Lstat(filepath.Join(project, "h2")); !os.IsNotExist(err) {
				t.Errorf("h2 was written: %v", err)
			}
		})
	}
}
