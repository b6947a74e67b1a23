package cmdutil

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

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
