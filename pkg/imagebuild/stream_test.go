package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// clock advances a second each time it is read, so elapsed times are predictable: a step
// takes 1s, the last 2s (the build's end is read first).
func clock() func() time.Time {
	t := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Second); return t }
}

// follow runs stream through the parser, recording its events.
func follow(t *testing.T, stream string) (BuildResult, []Event, error) {
	t.Helper()
	var evs []Event
	res, err := (&Images{Now: clock()}).follow(context.Background(), strings.NewReader(stream), "sandbox", "sbx-sandbox:bookworm-slim",
		func(ev Event) { evs = append(evs, ev) })
	return res, evs, err
}

// TestFollowEvents checks the events of a successful build, in order, less the messages.
func TestFollowEvents(t *testing.T) {
	res, evs, err := follow(t, enginetest.CachedBuild)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if want := "sha256:fc10d31fd0795ca890bae9517600dee12a402287cc96e96f212bf6c18aa4b4a1"; res.ID != want {
		t.Errorf("ID = %q, want %q", res.ID, want)
	}
	if res.Tag != "sbx-sandbox:bookworm-slim" || res.Profile != "sandbox" || res.Elapsed <= 0 {
		t.Errorf("result = %+v", res)
	}
	var got []string
	messages := 0
	for _, ev := range evs {
		if _, ok := ev.(Message); ok {
			messages++
			continue
		}
		got = append(got, fmt.Sprintf("%T %+v", ev, ev))
	}
	want := []string{
		"imagebuild.BuildStarted {Profile:sandbox Tag:sbx-sandbox:bookworm-slim}",
		"imagebuild.StepStarted {Step:1 Steps:5 Instruction:FROM debian:bookworm-slim}",
		"imagebuild.StepDone {Step:1 Steps:5 Instruction:FROM debian:bookworm-slim Cached:false Elapsed:1s}",
		"imagebuild.StepStarted {Step:2 Steps:5 Instruction:ENV LANG=C.UTF-8}",
		"imagebuild.StepDone {Step:2 Steps:5 Instruction:ENV LANG=C.UTF-8 Cached:true Elapsed:1s}",
		"imagebuild.StepStarted {Step:3 Steps:5 Instruction:RUN set -eux; apt-get update; apt-get install -y --no-install-recommends bash}",
		"imagebuild.Output {Line:Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]}",
		"imagebuild.Output {Line:Reading package lists... Done}",
		"imagebuild.StepDone {Step:3 Steps:5 Instruction:RUN set -eux; apt-get update; apt-get install -y --no-install-recommends bash Cached:false Elapsed:1s}",
		"imagebuild.StepStarted {Step:4 Steps:5 Instruction:USER sandbox}",
		"imagebuild.StepDone {Step:4 Steps:5 Instruction:USER sandbox Cached:true Elapsed:1s}",
		"imagebuild.StepStarted {Step:5 Steps:5 Instruction:LABEL dev.sbx.profile=sandbox}",
		"imagebuild.StepDone {Step:5 Steps:5 Instruction:LABEL dev.sbx.profile=sandbox Cached:false Elapsed:2s}",
		"imagebuild.BuildDone {Result:{Profile:sandbox Tag:sbx-sandbox:bookworm-slim ID:sha256:fc10d31fd0795ca890bae9517600dee12a402287cc96e96f212bf6c18aa4b4a1 Elapsed:10s}}",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := strings.Count(enginetest.CachedBuild, "\n"); messages != n {
		t.Errorf("%d messages, want one per line of the stream (%d)", messages, n)
	}
}

func TestFollowPullProgress(t *testing.T) {
	_, evs, err := follow(t, `{"status":"Downloading","id":"abc123","progressDetail":{"current":1,"total":2}}`+"\n")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := evs[1].(Message); !ok || m.Pull != "abc123 Downloading" || m.Stream != "" || !strings.HasPrefix(string(m.Raw), `{"status"`) {
		t.Errorf("message = %#v", evs[1])
	}
}

func TestFollowFailure(t *testing.T) {
	_, evs, err := follow(t, enginetest.FailedBuild)
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
	if last, ok := evs[len(evs)-1].(BuildFailed); !ok || last.Err != be {
		t.Errorf("last event = %#v, want the failure", evs[len(evs)-1])
	}
	summary := be.Summary()
	for _, want := range []string{"step 3/4 failed: RUN echo start", "last 20 lines of its output:\n  line 7\n", "  line 25\n  no newline\n"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
	if strings.Contains(summary, "line 6\n") || strings.Contains(summary, "Removing intermediate") {
		t.Errorf("summary shows more than the last 20 lines of output:\n%s", summary)
	}
}

func TestFollowWithoutProgress(t *testing.T) {
	m := &Images{}
	if _, err := m.follow(context.Background(), strings.NewReader(enginetest.CachedBuild), "sandbox", "t", nil); err != nil {
		t.Fatalf("follow with nil progress: %v", err)
	}
	_, err := m.follow(context.Background(), strings.NewReader(enginetest.FailedBuild), "sandbox", "t", nil)
	var be *BuildError
	if !errors.As(err, &be) || len(be.Tail) != tailLines {
		t.Fatalf("err = %v, want a BuildError with its tail", err)
	}
}

func TestFollowBrokenStream(t *testing.T) {
	_, evs, err := follow(t, `{"stream":"Step 1/2 : FROM x"}`+"\n{not json")
	if err == nil || !strings.Contains(err.Error(), "reading the build output of sbx-sandbox:bookworm-slim") {
		t.Fatalf("err = %v", err)
	}
	if last, ok := evs[len(evs)-1].(BuildFailed); !ok || last.Err != nil {
		t.Errorf("last event = %#v, want a failure without a BuildError", evs[len(evs)-1])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = (&Images{}).follow(ctx, errReader{context.Canceled}, "sandbox", "t", nil)
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
