package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// flood is more than any tool keeps of what the sandbox says, and more than a tool's own
// work (some 24 MiB to pass 256 KiB of output through the protocol) could hide.
const flood = 256 << 20

// answering is a sandbox whose commands answer as answer says, given the name the script
// runs under (sbx-file, sbx-script, sbx-logs...).
func answering(t *testing.T, answer func(script string) enginetest.Answer) func(context.Context) (*sandbox.Manager, *sandbox.Sandbox, func(), error) {
	fake := &enginetest.FakeEngine{T: t}
	fake.AnswerExecs(func(cmd []string) enginetest.Answer {
		for _, a := range cmd {
			if strings.HasPrefix(a, "sbx-") && a != "sbx-exec" {
				return answer(a)
			}
		}
		return answer("")
	})
	m := &sandbox.Manager{Engine: fake, Now: time.Now}
	sb := &sandbox.Sandbox{Name: "agent", ID: "c1", Status: "running"}
	return func(context.Context) (*sandbox.Manager, *sandbox.Sandbox, func(), error) {
		return m, sb, func() {}, nil
	}
}

func TestFileToolsFailPastTheirCap(t *testing.T) {
	cs := connect(t, resolved(nil), answering(t, func(string) enginetest.Answer {
		return enginetest.Answer{Stdout: io.MultiReader(strings.NewReader("12\n"), enginetest.Repeat('a', flood))}
	}))
	for tool, args := range map[string]any{"read_file": map[string]any{"path": "/etc/x"}, "list_files": map[string]any{"path": "/etc"}} {
		var msg string
		var isErr bool
		if n := enginetest.Allocated(func() { res := call(t, cs, tool, args); msg, isErr = text(res), res.IsError }); n > flood/4 {
			t.Errorf("%s: %d bytes allocated for %d bytes of output", tool, n, flood)
		}
		if !isErr || !strings.Contains(msg, "larger than") || len(msg) > 300 {
			t.Errorf("%s: error %v, %.300q", tool, isErr, msg)
		}
	}
}

// process_output keeps only the end of each stream, however much the sandbox sends.
func TestProcessOutputKeepsOnlyTheEnd(t *testing.T) {
	cs := connect(t, resolved(nil), answering(t, func(script string) enginetest.Answer {
		switch script {
		case "sbx-script":
			return enginetest.Answer{Stdout: strings.NewReader("abc123\t7\t1700000000.000000\t0\t1700000001.000000\t0\t0\t0\t0\t262144\t{\"command\":[\"yes\"]}\n")}
		case "sbx-logs":
			return enginetest.Answer{Stdout: io.MultiReader(enginetest.Repeat('o', flood), strings.NewReader("\nlast line\n"))}
		}
		t.Errorf("unexpected command %q", script)
		return enginetest.Answer{Code: 1}
	}))
	var res OutputOutput
	n := enginetest.Allocated(func() {
		r := call(t, cs, "process_output", map[string]any{"id": "abc123"})
		if err := json.Unmarshal([]byte(text(r)), &res); err != nil || r.IsError {
			t.Fatalf("%v: %.300s", err, text(r))
		}
	})
	if n > flood/4 {
		t.Errorf("%d bytes allocated for %d bytes of output", n, flood)
	}
	if !res.Truncated || len(res.Stdout) > DefaultMaxOutput || !strings.HasSuffix(res.Stdout, "\nlast line\n") || !slices.Equal(res.Command, []string{"yes"}) {
		t.Errorf("truncated %v, %d bytes of stdout ending %q, command %v", res.Truncated, len(res.Stdout), res.Stdout[max(0, len(res.Stdout)-20):], res.Command)
	}
}
