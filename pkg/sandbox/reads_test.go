package sandbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// What a sandbox says comes back to sbx through these fakes, which stream far more than sbx
// may keep: each test checks both the answer and that sbx's heap never held it.

// flood is more output than any cap sbx keeps, and more than sbx's own work (some 17 MiB under
// the race detector, to fill a 4 MiB buffer and fail) could hide.
const flood = 256 << 20

func answering(t *testing.T, answer func(cmd []string) enginetest.Answer) *sandbox.Manager {
	// A sandbox that still runs, when sbx asks after a failed check.
	fake := &enginetest.FakeEngine{T: t, ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: &container.State{Running: true}}}, nil
	}}
	fake.AnswerExecs(answer)
	return &sandbox.Manager{Engine: fake, Now: time.Now}
}

var box = &sandbox.Sandbox{Name: "box", ID: "c1", Status: "running"}

func TestListsFailPastTheirCap(t *testing.T) {
	for _, tt := range []struct {
		what string
		list func(*sandbox.Manager) error
	}{
		{"the process list", func(m *sandbox.Manager) error { _, err := m.Procs(context.Background(), box); return err }},
		{"the shell session list", func(m *sandbox.Manager) error { _, err := m.ShellSessions(context.Background(), box); return err }},
	} {
		m := answering(t, func([]string) enginetest.Answer { return enginetest.Answer{Stdout: enginetest.Repeat('a', flood)} })
		var err error
		if n := enginetest.Allocated(func() { err = tt.list(m) }); n > flood/4 {
			t.Errorf("%s: %d bytes allocated for %d bytes of output", tt.what, n, flood)
		}
		if err == nil || !strings.HasPrefix(err.Error(), tt.what+` of sandbox "box" is larger than`) || len(err.Error()) > 200 {
			t.Errorf("%s: %.300v", tt.what, err)
		}
	}
}

// The stderr of a failed start or signal is quoted in the error, but only its beginning.
func TestProcErrorsQuoteLittleStderr(t *testing.T) {
	m := answering(t, func([]string) enginetest.Answer {
		return enginetest.Answer{Stderr: enginetest.Repeat('e', flood), Code: 1}
	})
	ctx := context.Background()
	for what, call := range map[string]func() error{
		"start": func() error {
			_, err := m.StartProc(ctx, box, sandbox.ProcOptions{Cmd: []string{"sleep", "1"}})
			return err
		},
		"kill": func() error { _, err := m.KillProc(ctx, box, "abc123", "TERM"); return err },
	} {
		var err error
		if n := enginetest.Allocated(func() { err = call() }); n > flood/4 {
			t.Errorf("%s: %d bytes allocated", what, n)
		}
		if err == nil || len(err.Error()) > 8<<10 || !strings.Contains(err.Error(), "eeee") {
			t.Errorf("%s: %d bytes of error: %.200v", what, len(err.Error()), err)
		}
	}
}

// A command killed with 137 makes sbx ask the sandbox whether the OOM killer did it; the
// answer is one word, and a flood instead is not kept.
func TestOOMCheckReadsLittle(t *testing.T) {
	m := answering(t, func(cmd []string) enginetest.Answer {
		if slices.Contains(cmd, "sbx-helper") {
			return enginetest.Answer{Stdout: enginetest.Repeat('o', flood)}
		}
		return enginetest.Answer{Code: 137}
	})
	var res *sandbox.ExecResult
	var err error
	if n := enginetest.Allocated(func() { res, err = m.Exec(context.Background(), box, sandbox.ExecOptions{Cmd: []string{"true"}}) }); n > flood/4 {
		t.Errorf("%d bytes allocated", n)
	}
	if err != nil || res.ExitCode != 137 || res.OOMKilled {
		t.Errorf("%+v %v", res, err)
	}
}
