package sandbox_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
)

// What a sandbox says comes back to sbx through sandboxtest.Answering, which streams far more
// than sbx may keep: each test checks both the answer and that sbx's heap never held it.

// A command killed with 137 makes sbx ask the sandbox whether the OOM killer did it; the
// answer is one word, and a sandboxtest.Flood instead is not kept.
func TestOOMCheckReadsLittle(t *testing.T) {
	m := sandboxtest.Answering(t, func(cmd []string) enginetest.Answer {
		if slices.Contains(cmd, "sbx-helper") {
			return enginetest.Answer{Stdout: enginetest.Repeat('o', sandboxtest.Flood)}
		}
		return enginetest.Answer{Code: 137}
	})
	var res *sandbox.ExecResult
	var err error
	if n := enginetest.Allocated(func() {
		res, err = m.Exec(context.Background(), sandboxtest.Box, sandbox.ExecOptions{Cmd: []string{"true"}})
	}); n > sandboxtest.Flood/4 {
		t.Errorf("%d bytes allocated", n)
	}
	if err != nil || res.ExitCode != 137 || res.OOMKilled {
		t.Errorf("%+v %v", res, err)
	}
}
