package proc_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/proc"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
)

// What a sandbox lists or says on stderr is streamed through sandboxtest.Answering, far more
// than sbx may keep: each test checks both the answer and that sbx's heap never held it.

func TestListsFailPastTheirCap(t *testing.T) {
	for _, tt := range []struct {
		what string
		list func(*sandbox.Manager) error
	}{
		{"the process list", func(m *sandbox.Manager) error {
			_, err := proc.List(context.Background(), m, sandboxtest.Box)
			return err
		}},
		{"the shell session list", func(m *sandbox.Manager) error {
			_, err := proc.Sessions(context.Background(), m, sandboxtest.Box)
			return err
		}},
	} {
		m := sandboxtest.Answering(t, func([]string) enginetest.Answer {
			return enginetest.Answer{Stdout: enginetest.Repeat('a', sandboxtest.Flood)}
		})
		var err error
		if n := enginetest.Allocated(func() { err = tt.list(m) }); n > sandboxtest.Flood/4 {
			t.Errorf("%s: %d bytes allocated for %d bytes of output", tt.what, n, sandboxtest.Flood)
		}
		if err == nil || !strings.HasPrefix(err.Error(), tt.what+` of sandbox "box" is larger than`) || len(err.Error()) > 200 {
			t.Errorf("%s: %.300v", tt.what, err)
		}
	}
}

// The stderr of a failed start or signal is quoted in the error, but only its beginning.
func TestProcErrorsQuoteLittleStderr(t *testing.T) {
	m := sandboxtest.Answering(t, func([]string) enginetest.Answer {
		return enginetest.Answer{Stderr: enginetest.Repeat('e', sandboxtest.Flood), Code: 1}
	})
	ctx := context.Background()
	for what, call := range map[string]func() error{
		"start": func() error {
			_, err := proc.Start(ctx, m, sandboxtest.Box, proc.Options{Cmd: []string{"sleep", "1"}})
			return err
		},
		"kill": func() error { _, err := proc.Kill(ctx, m, sandboxtest.Box, "abc123", "TERM"); return err },
	} {
		var err error
		if n := enginetest.Allocated(func() { err = call() }); n > sandboxtest.Flood/4 {
			t.Errorf("%s: %d bytes allocated", what, n)
		}
		if err == nil || len(err.Error()) > 8<<10 || !strings.Contains(err.Error(), "eeee") {
			t.Errorf("%s: %d bytes of error: %.200v", what, len(err.Error()), err)
		}
	}
}
