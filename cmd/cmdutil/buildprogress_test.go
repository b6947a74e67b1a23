package cmdutil

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// stopped is a clock that never moves, so every elapsed time reads 0.0s.
func stopped() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }

// follow shows the build of the sandbox image, whose engine answers with stream, through p.
func follow(t *testing.T, p *BuildProgress, stream string) (imagebuild.BuildResult, error) {
	t.Helper()
	eng := &enginetest.FakeEngine{T: t, ImageInspectFn: enginetest.ImageStore{}.Inspect,
		ImageBuildFn: enginetest.AnswerBuild(stream)}
	return (&imagebuild.Images{Engine: eng, Now: p.Now}).Build(context.Background(), images.ProfileSandbox, imagebuild.BuildOptions{Progress: p.Show})
}

func TestFollowSuccess(t *testing.T) {
	var out bytes.Buffer
	if _, err := follow(t, &BuildProgress{Out: &out, Now: stopped}, enginetest.CachedBuild); err != nil {
		t.Fatalf("follow: %v", err)
	}
	want := `building sbx-sandbox:bookworm-slim (profile sandbox)
[1/5] FROM debian:bookworm-slim
[2/5] ENV LANG=C.UTF-8
[3/5] RUN set -eux; apt-get update; apt-get install -y --no-install-recommends bash
[4/5] USER sandbox
[5/5] LABEL dev.sbx.profile=sandbox
built sbx-sandbox:bookworm-slim (sha256:fc10d31fd079) in 0.0s
`
	if got := out.String(); got != want {
		t.Errorf("auto progress without a terminal:\n%s\nwant:\n%s", got, want)
	}
}

func TestFollowFailure(t *testing.T) {
	var out bytes.Buffer
	_, err := follow(t, &BuildProgress{Out: &out, Now: stopped}, enginetest.FailedBuild)
	var be *imagebuild.BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v (%T), want a *BuildError", err, err)
	}
	// The summary's contents are imagebuild's; the output ends with it, once.
	if s := be.Summary(); s == "" || !strings.HasSuffix(out.String(), "[3/4] RUN echo start && for i in $(seq 1 25); do echo \"line $i\"; done && printf \"no newline\" && exit 3\n"+s) {
		t.Errorf("output does not end with the failing step's summary:\n%s", out.String())
	}
}

func TestFollowModes(t *testing.T) {
	tests := []struct {
		name      string
		p         BuildProgress
		stream    string
		want      []string
		dontWant  []string
		wantLines int // of output, when not 0
	}{
		{name: "plain streams the log", p: BuildProgress{Mode: ProgressPlain}, stream: enginetest.CachedBuild,
			want:     []string{"Step 3/5 : RUN set -eux;", " ---> Running in aefca295fb06\n", "Get:1 http://deb.debian.org/debian bookworm InRelease", "Successfully tagged sbx-sandbox:bookworm-slim\n"},
			dontWant: []string{"building sbx-sandbox"}},
		{name: "plain failure does not repeat the tail", p: BuildProgress{Mode: ProgressPlain}, stream: enginetest.FailedBuild,
			want: []string{"line 1\n"}, dontWant: []string{"last 20 lines"}},
		{name: "json passes the engine's messages", p: BuildProgress{Mode: ProgressJSON}, stream: enginetest.CachedBuild,
			want: []string{`{"aux":{"ID":"sha256:fc10d31fd0795ca890bae9517600dee12a402287cc96e96f212bf6c18aa4b4a1"}}` + "\n"}, wantLines: strings.Count(enginetest.CachedBuild, "\n")},
		{name: "quiet shows nothing on success", p: BuildProgress{Quiet: true, Mode: ProgressPlain}, stream: enginetest.CachedBuild, dontWant: []string{"Step", "built"}},
		{name: "quiet still shows why a build failed", p: BuildProgress{Quiet: true}, stream: enginetest.FailedBuild,
			want: []string{"step 3/4 failed", "  no newline\n"}},
		{name: "live view on a terminal", p: BuildProgress{TTY: true, Width: 60}, stream: enginetest.CachedBuild,
			want: []string{
				"[2/5] ENV LANG=C.UTF-8", "cached\n",
				"\x1b[1A\r\x1b[J", // the live area is cleared before it is redrawn
				"\x1b[2A\r\x1b[J", // two lines once the step has output
				"      Reading package lists... Done\n",
				"built sbx-sandbox:bookworm-slim (sha256:fc10d31fd079) in ",
			},
			dontWant: []string{"\x1b[31m", "Removing intermediate"}},
		{name: "live view failure", p: BuildProgress{TTY: true, Width: 60}, stream: enginetest.FailedBuild,
			want: []string{"step 3/4 failed: RUN echo start", "last 20 lines of its output:\n  line 7\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			p := tt.p
			p.Out, p.Now = &out, stopped
			_, _ = follow(t, &p, tt.stream)
			got := out.String()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.dontWant {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, got)
				}
			}
			if tt.wantLines > 0 && strings.Count(got, "\n") != tt.wantLines {
				t.Errorf("output has %d lines, want %d", strings.Count(got, "\n"), tt.wantLines)
			}
		})
	}
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]`)

func TestLiveViewFitsTheTerminal(t *testing.T) {
	var out bytes.Buffer
	_, _ = follow(t, &BuildProgress{Out: &out, TTY: true, Width: 40, Now: stopped}, enginetest.CachedBuild)
	for _, line := range strings.Split(ansiEscape.ReplaceAllString(out.String(), ""), "\n") {
		line = strings.TrimPrefix(line, "\r")
		if n := len([]rune(line)); n > 40 && !strings.HasPrefix(line, "building ") && !strings.HasPrefix(line, "built ") {
			t.Errorf("line of %d columns on a 40-column terminal: %q", n, line)
		}
	}
}

func TestFmtElapsed(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1500 * time.Millisecond: "1.5s",
		59 * time.Second:        "59.0s",
		192 * time.Second:       "3m12s",
	} {
		if got := fmtElapsed(d); got != want {
			t.Errorf("fmtElapsed(%s) = %q, want %q", d, got, want)
		}
	}
}

// A pull is drawn like a build: a line to start (with the registry and where the credentials
// came from) and one to end, a live line of the layers on a terminal, the engine's messages
// in plain and json; nothing when quiet.
func TestPullProgress(t *testing.T) {
	stream := `{"status":"Pulling from team/tool","id":"1"}` + "\n" +
		`{"status":"Downloading","progressDetail":{"current":500,"total":1000},"id":"abc"}` + "\n" +
		`{"status":"Pull complete","id":"abc"}` + "\n"
	pull := func(p *BuildProgress) string {
		var out bytes.Buffer
		p.Out, p.Now = &out, stopped
		reg := enginetest.ImageStore{}
		eng := &enginetest.FakeEngine{T: t, ImageInspectFn: reg.Inspect,
			ImagePullFn: func(_ context.Context, ref string, _ image.PullOptions) (io.ReadCloser, error) {
				reg[ref] = enginetest.Image("sha256:0123456789abcdef", 0, "", nil)
				return io.NopCloser(strings.NewReader(stream)), nil
			}}
		auth := func(context.Context, string) (string, string, error) { return "x", "auths in /c/config.json", nil }
		if err := (&imagebuild.Images{Engine: eng, Now: stopped, Auth: auth}).Pull(context.Background(), "127.0.0.1:5000/team/tool:1", p.Show); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	head := "pulling 127.0.0.1:5000/team/tool:1 from 127.0.0.1:5000 (with credentials from auths in /c/config.json)\n"
	tail := "pulled 127.0.0.1:5000/team/tool:1 (sha256:0123456789ab) in 0.0s\n"
	if got := pull(&BuildProgress{}); got != head+tail {
		t.Errorf("auto, not a terminal:\n%q", got)
	}
	if got := pull(&BuildProgress{TTY: true, Width: 80}); !strings.HasPrefix(got, head) || !strings.HasSuffix(got, "\x1b[1A\r\x1b[J"+tail) ||
		!strings.Contains(got, "  0/1 layers, 500B of 1kB\n") || !strings.Contains(got, "  1/1 layers, 500B of 1kB\n") {
		t.Errorf("auto on a terminal:\n%q", got)
	}
	if got := pull(&BuildProgress{Mode: ProgressPlain}); got != "1 Pulling from team/tool\nabc Downloading\nabc Pull complete\n" {
		t.Errorf("plain:\n%q", got)
	}
	if got := pull(&BuildProgress{Mode: ProgressJSON}); got != stream {
		t.Errorf("json:\n%q", got)
	}
	if got := pull(&BuildProgress{Quiet: true}); got != "" {
		t.Errorf("quiet:\n%q", got)
	}
}
