package sandbox

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// okStream is what Docker 20.10's classic builder sent for a build of the sandbox image
// with every step cached, cut to five steps.
const okStream = `{"stream":"Step 1/5 : FROM debian:bookworm-slim"}
{"stream":"\n"}
{"stream":" ---\u003e 8a019e0ba42e\n"}
{"stream":"Step 2/5 : ENV LANG=C.UTF-8"}
{"stream":"\n"}
{"stream":" ---\u003e Using cache\n"}
{"stream":" ---\u003e 0f65a957d00d\n"}
{"stream":"Step 3/5 : RUN set -eux;     apt-get update;     apt-get install -y --no-install-recommends         bash"}
{"stream":"\n"}
{"stream":" ---\u003e Running in aefca295fb06\n"}
{"stream":"Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\n"}
{"stream":"Reading package lists...\r\u001b[31mReading package lists... Done\u001b[0m\n"}
{"stream":"Removing intermediate container aefca295fb06\n"}
{"stream":" ---\u003e 962d29d6efb2\n"}
{"stream":"Step 4/5 : USER sandbox"}
{"stream":"\n"}
{"stream":" ---\u003e Using cache\n"}
{"stream":" ---\u003e 4be6fb4e3059\n"}
{"stream":"Step 5/5 : LABEL dev.sbx.profile=sandbox"}
{"stream":"\n"}
{"stream":" ---\u003e Running in 1bb1a5c3d0f7\n"}
{"stream":"Removing intermediate container 1bb1a5c3d0f7\n"}
{"stream":" ---\u003e fc10d31fd079\n"}
{"aux":{"ID":"sha256:fc10d31fd0795ca890bae9517600dee12a402287cc96e96f212bf6c18aa4b4a1"}}
{"stream":"Successfully built fc10d31fd079\n"}
{"stream":"Successfully tagged sbx-sandbox:bookworm-slim\n"}
`

// failStream is a real failing RUN step: 26 lines of output, the last without a newline.
const failStream = `{"stream":"Step 1/4 : FROM debian:bookworm-slim"}
{"stream":"\n"}
{"stream":" ---\u003e 8a019e0ba42e\n"}
{"stream":"Step 2/4 : ENV A=1"}
{"stream":"\n"}
{"stream":" ---\u003e Running in a6956005c101\n"}
{"stream":"Removing intermediate container a6956005c101\n"}
{"stream":" ---\u003e 40b227157226\n"}
{"stream":"Step 3/4 : RUN echo start \u0026\u0026 for i in $(seq 1 25); do echo \"line $i\"; done \u0026\u0026 printf \"no newline\" \u0026\u0026 exit 3"}
{"stream":"\n"}
{"stream":" ---\u003e Running in aefca295fb06\n"}
{"stream":"start\n"}
{"stream":"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n"}
{"stream":"line 11\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20\nline 21\nline 22\nline 23\nline 24\nline 25\nno newline"}
{"stream":"Removing intermediate container aefca295fb06\n"}
{"errorDetail":{"code":3,"message":"The command '/bin/sh -c echo start \u0026\u0026 for i in $(seq 1 25); do echo \"line $i\"; done \u0026\u0026 printf \"no newline\" \u0026\u0026 exit 3' returned a non-zero code: 3"},"error":"The command '/bin/sh -c echo start \u0026\u0026 for i in $(seq 1 25); do echo \"line $i\"; done \u0026\u0026 printf \"no newline\" \u0026\u0026 exit 3' returned a non-zero code: 3"}
`

// clock advances a second each time it is read, so elapsed times are predictable.
func clock() func() time.Time {
	t := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Second); return t }
}

func follow(t *testing.T, p *Progress, stream string) (BuildResult, error) {
	t.Helper()
	return p.follow(context.Background(), strings.NewReader(stream), "sandbox", "sbx-sandbox:bookworm-slim")
}

func TestFollowSuccess(t *testing.T) {
	var out bytes.Buffer
	res, err := follow(t, &Progress{Out: &out, Now: clock()}, okStream)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if want := "sha256:fc10d31fd0795ca890bae9517600dee12a402287cc96e96f212bf6c18aa4b4a1"; res.ID != want {
		t.Errorf("ID = %q, want %q", res.ID, want)
	}
	if res.Tag != "sbx-sandbox:bookworm-slim" || res.Profile != "sandbox" || res.Elapsed <= 0 {
		t.Errorf("result = %+v", res)
	}
	want := `building sbx-sandbox:bookworm-slim (profile sandbox)
[1/5] FROM debian:bookworm-slim
[2/5] ENV LANG=C.UTF-8
[3/5] RUN set -eux; apt-get update; apt-get install -y --no-install-recommends bash
[4/5] USER sandbox
[5/5] LABEL dev.sbx.profile=sandbox
`
	if got := out.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, "built sbx-sandbox:bookworm-slim (sha256:fc10d31fd079) in ") {
		t.Errorf("auto progress without a terminal:\n%s\nwant it to start with:\n%s", got, want)
	}
}

func TestFollowFailure(t *testing.T) {
	var out bytes.Buffer
	_, err := follow(t, &Progress{Out: &out, Now: clock()}, failStream)
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v (%T), want a *BuildError", err, err)
	}
	if be.Step != 3 || be.Steps != 4 || !strings.HasPrefix(be.Instruction, "RUN echo start") {
		t.Errorf("failing step = %d/%d %q", be.Step, be.Steps, be.Instruction)
	}
	if len(be.Tail) != tailLines {
		t.Fatalf("tail has %d lines, want %d: %q", len(be.Tail), tailLines, be.Tail)
	}
	if be.Tail[0] != "line 7" || be.Tail[tailLines-1] != "no newline" {
		t.Errorf("tail = %q, want line 7 … no newline", be.Tail)
	}
	if got, want := err.Error(), `building image sbx-sandbox:bookworm-slim failed at step 3/4 (RUN echo start && for i in $(seq 1 25); do echo "line $i"; …): exit status 3`; got != want {
		t.Errorf("error:\n got %s\nwant %s", got, want)
	}
	if errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("exit code = %d, want %d", errs.ExitCode(err), errs.CodeFailure)
	}
	if h := errs.Hint(err); !strings.Contains(h, "--progress plain") {
		t.Errorf("hint = %q", h)
	}
	summary := out.String()
	for _, want := range []string{"step 3/4 failed: RUN echo start", "last 20 lines of its output:\n  line 7\n", "  line 25\n  no newline\n"} {
		if !strings.Contains(summary, want) {
			t.Errorf("output lacks %q:\n%s", want, summary)
		}
	}
	if strings.Contains(summary, "line 6\n") || strings.Contains(summary, "Removing intermediate") {
		t.Errorf("summary shows more than the last 20 lines of output:\n%s", summary)
	}
}

func TestFollowModes(t *testing.T) {
	tests := []struct {
		name      string
		p         Progress
		stream    string
		want      []string
		dontWant  []string
		wantLines int // of output, when not 0
	}{
		{name: "plain streams the log", p: Progress{Mode: ProgressPlain}, stream: okStream,
			want:     []string{"Step 3/5 : RUN set -eux;", " ---> Running in aefca295fb06\n", "Get:1 http://deb.debian.org/debian bookworm InRelease", "Successfully tagged sbx-sandbox:bookworm-slim\n"},
			dontWant: []string{"building sbx-sandbox"}},
		{name: "plain failure does not repeat the tail", p: Progress{Mode: ProgressPlain}, stream: failStream,
			want: []string{"line 1\n"}, dontWant: []string{"last 20 lines"}},
		{name: "json passes the engine's messages", p: Progress{Mode: ProgressJSON}, stream: okStream,
			want: []string{`{"aux":{"ID":"sha256:fc10d31fd0795ca890bae9517600dee12a402287cc96e96f212bf6c18aa4b4a1"}}` + "\n"}, wantLines: strings.Count(okStream, "\n")},
		{name: "quiet shows nothing on success", p: Progress{Quiet: true, Mode: ProgressPlain}, stream: okStream, dontWant: []string{"Step", "built"}},
		{name: "quiet still shows why a build failed", p: Progress{Quiet: true}, stream: failStream,
			want: []string{"step 3/4 failed", "  no newline\n"}},
		{name: "live view on a terminal", p: Progress{TTY: true, Width: 60}, stream: okStream,
			want: []string{
				"[2/5] ENV LANG=C.UTF-8", "cached\n",
				"\x1b[1A\r\x1b[J", // the live area is cleared before it is redrawn
				"\x1b[2A\r\x1b[J", // two lines once the step has output
				"      Reading package lists... Done\n",
				"built sbx-sandbox:bookworm-slim (sha256:fc10d31fd079) in ",
			},
			dontWant: []string{"\x1b[31m", "Removing intermediate"}},
		{name: "live view failure", p: Progress{TTY: true, Width: 60}, stream: failStream,
			want: []string{"step 3/4 failed: RUN echo start", "last 20 lines of its output:\n  line 7\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			p := tt.p
			p.Out, p.Now = &out, clock()
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

func TestLiveViewFitsTheTerminal(t *testing.T) {
	var out bytes.Buffer
	_, _ = follow(t, &Progress{Out: &out, TTY: true, Width: 40, Now: clock()}, okStream)
	for _, line := range strings.Split(ansiEscape.ReplaceAllString(out.String(), ""), "\n") {
		line = strings.TrimPrefix(line, "\r")
		if n := len([]rune(line)); n > 40 && !strings.HasPrefix(line, "building ") && !strings.HasPrefix(line, "built ") {
			t.Errorf("line of %d columns on a 40-column terminal: %q", n, line)
		}
	}
}

func TestFollowNilProgress(t *testing.T) {
	var p *Progress
	if _, err := p.follow(context.Background(), strings.NewReader(okStream), "sandbox", "t"); err != nil {
		t.Fatalf("follow with nil progress: %v", err)
	}
	_, err := p.follow(context.Background(), strings.NewReader(failStream), "sandbox", "t")
	var be *BuildError
	if !errors.As(err, &be) || len(be.Tail) != tailLines {
		t.Fatalf("err = %v, want a BuildError with its tail", err)
	}
}

func TestFollowBrokenStream(t *testing.T) {
	_, err := follow(t, nil, `{"stream":"Step 1/2 : FROM x"}`+"\n{not json")
	if err == nil || !strings.Contains(err.Error(), "reading the build output of sbx-sandbox:bookworm-slim") {
		t.Fatalf("err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = (*Progress)(nil).follow(ctx, errReader{context.Canceled}, "sandbox", "t")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v, want context.Canceled", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestBuildErrorHints(t *testing.T) {
	offline := &BuildError{Profile: "common", Tag: "x", Step: 5, Steps: 9, Instruction: "RUN apt-get update",
		Message: "The command '/bin/sh -c apt-get update' returned a non-zero code: 100",
		Tail:    []string{"W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.debian.org'"}}
	if h := offline.Hint(); !strings.Contains(h, "--network host") {
		t.Errorf("hint for an unreachable mirror = %q", h)
	}
	offline.network = "host"
	if h := offline.Hint(); strings.Contains(h, "--network host") {
		t.Errorf("hint suggests --network host to a build that used it: %q", h)
	}
	early := &BuildError{Tag: "x", Message: "dockerfile parse error line 3: unknown instruction: RUNN"}
	if got, want := early.Error(), "building image x: dockerfile parse error line 3: unknown instruction: RUNN"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if early.Summary() != "" {
		t.Errorf("summary of a failure before any step = %q", early.Summary())
	}
	if h := early.Hint(); strings.Contains(h, "above") || !strings.Contains(h, "--progress plain") {
		t.Errorf("hint of a failure without output = %q", h)
	}
	long := &BuildError{Step: 1, Steps: 2, Instruction: strings.Repeat("x", 500)}
	if first, _, _ := strings.Cut(long.Summary(), "\n"); len(first) > 200 {
		t.Errorf("summary line of a long instruction has %d bytes", len(first))
	}
}

func TestCleanLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                         "plain",
		"50%\r75%\r100%":                "100%",
		"done\r":                        "done",
		"\x1b[1;32mgreen\x1b[0m\ttab":   "green tab",
		"bell\a and \x1b]0;title\a end": "bell and 0;title end",
	} {
		if got := cleanLine(in); got != want {
			t.Errorf("cleanLine(%q) = %q, want %q", in, got, want)
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
