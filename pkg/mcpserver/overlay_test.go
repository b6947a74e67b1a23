package mcpserver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/workspace"
)

// overlaySandbox is an overlay sandbox on a fake engine whose layers are real directories: a
// project with a.txt, and an upper layer where the sandbox changed a.txt and added b.txt.
func overlaySandbox(t *testing.T) (project string, sb func(context.Context) (*sandbox.Manager, *sandbox.Sandbox, func(), error)) {
	t.Helper()
	state, project := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "a.txt"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := overlay.Layers{Lower: project, Dir: filepath.Join(state, "overlay", "agent")}
	if err := overlay.Prepare(l, os.Geteuid(), os.Getegid()); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"a.txt": "new\n", "b.txt": "added\n"} {
		if err := os.WriteFile(filepath.Join(l.Upper(), name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: "agent",
		sandbox.LabelWorkspace: config.WorkspaceOverlay, sandbox.LabelProject: project}
	fake := &enginetest.FakeEngine{T: t, ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "c1"}, Config: &container.Config{Labels: labels}}, nil
	}}
	m := &sandbox.Manager{Engine: fake, State: &sandbox.StateStore{Dir: state, Now: time.Now}}
	return project, func(context.Context) (*sandbox.Manager, *sandbox.Sandbox, func(), error) {
		return m, &sandbox.Sandbox{Name: "agent", Labels: labels}, func() {}, nil
	}
}

func overlayResolved(mutate func(*config.Config)) *config.Resolved {
	return resolved(func(c *config.Config) {
		c.Workspace = config.WorkspaceOverlay
		if mutate != nil {
			mutate(c)
		}
	})
}

func TestDiffTool(t *testing.T) {
	_, sb := overlaySandbox(t)
	cs := connect(t, overlayResolved(nil), sb)
	res := call(t, cs, "diff", map[string]any{"patch": true})
	if res.IsError {
		t.Fatal(text(res))
	}
	var out DiffOutput
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Changes) != 2 || out.Changes[0].Path != "a.txt" || out.Changes[0].Status != overlay.Modified || out.Changes[1].Path != "b.txt" || out.Changes[1].Status != overlay.Added {
		t.Errorf("changes %s", raw)
	}
	if !strings.Contains(out.Patch, "-old\n+new\n") || !strings.Contains(out.Patch, "+++ b/b.txt\n") || out.Truncated {
		t.Errorf("patch %q (truncated %v)", out.Patch, out.Truncated)
	}
}

// apply writes on the host, so it is denied unless the user's policy allows it; denied, it
// fails before the sandbox is touched.
func TestApplyToolDeniedByDefault(t *testing.T) {
	cs := connect(t, overlayResolved(nil), nil)
	res := call(t, cs, "apply", map[string]any{})
	if !res.IsError || !strings.Contains(text(res), `tool "apply" is denied by "apply" in tools.deny`) || !strings.Contains(text(res), "hint:") {
		t.Fatalf("error %v, %q", res.IsError, text(res))
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "apply" && !strings.HasPrefix(tool.Description, "DENIED by the tool policy") {
			t.Errorf("apply's description: %s", tool.Description)
		}
	}
}

func TestApplyToolWhenAllowed(t *testing.T) {
	project, sb := overlaySandbox(t)
	cs := connect(t, overlayResolved(func(c *config.Config) {
		c.Tools.Deny, c.Tools.Allow = []string{config.ToolBrowser}, append(c.Tools.Allow, config.ToolApply)
	}), sb)
	res := call(t, cs, "apply", map[string]any{"paths": []string{"b.txt"}})
	if res.IsError {
		t.Fatal(text(res))
	}
	if b, err := os.ReadFile(filepath.Join(project, "b.txt")); err != nil || string(b) != "added\n" {
		t.Errorf("b.txt on the host: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "a.txt")); string(b) != "old\n" {
		t.Errorf("a.txt was not asked for, yet holds %q", b)
	}
	res = call(t, cs, "diff", map[string]any{})
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(raw), `"path":"a.txt"`) || strings.Contains(string(raw), `"path":"b.txt"`) {
		t.Errorf("diff after apply: %s %s", raw, text(res))
	}
}

func TestOverlayToolsNeedAnOverlay(t *testing.T) {
	cs := connect(t, resolved(nil), nil)
	res := call(t, cs, "diff", map[string]any{})
	if !res.IsError || !strings.Contains(text(res), "not overlay") {
		t.Fatalf("error %v, %q", res.IsError, text(res))
	}
}

func TestCheckpointTool(t *testing.T) {
	_, sb := overlaySandbox(t)
	cs := connect(t, overlayResolved(nil), sb)
	res := call(t, cs, "checkpoint", map[string]any{"label": "try-1"})
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(raw), `"label":"try-1"`) {
		t.Fatalf("checkpoint: %s %s", raw, text(res))
	}
	if res := call(t, cs, "checkpoint", map[string]any{"label": "../x"}); !res.IsError {
		t.Errorf("a label with a slash was accepted")
	}
	// write governs both: denied, they fail before the sandbox is touched.
	cs = connect(t, overlayResolved(func(c *config.Config) { c.Tools.Deny = append(c.Tools.Deny, "write") }), nil)
	for _, tool := range []string{"checkpoint", "rollback"} {
		if res := call(t, cs, tool, map[string]any{"label": "one"}); !res.IsError || !strings.Contains(text(res), "denied by") {
			t.Errorf("%s: %v %q", tool, res.IsError, text(res))
		}
	}
}

// An agent tries something and undoes it: checkpoint, a change, rollback. The fake sandbox
// is not running, so nothing is stopped and restarted says so.
func TestRollbackTool(t *testing.T) {
	_, sb := overlaySandbox(t)
	cs := connect(t, overlayResolved(nil), sb)
	if res := call(t, cs, "checkpoint", map[string]any{"label": "before"}); res.IsError {
		t.Fatal(text(res))
	}
	m, s, _, _ := sb(context.Background())
	l, err := workspace.New(m).Layers(context.Background(), s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.Upper(), "c.txt"), []byte("tried\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := call(t, cs, "rollback", map[string]any{"label": "before"})
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(raw), `"restarted":false`) {
		t.Fatalf("rollback: %s %s", raw, text(res))
	}
	if _, err := os.Lstat(filepath.Join(l.Upper(), "c.txt")); err == nil {
		t.Error("the change after the checkpoint survived the rollback")
	}
	if b, err := os.ReadFile(filepath.Join(l.Upper(), "b.txt")); err != nil || string(b) != "added\n" {
		t.Errorf("b.txt after rollback: %q, %v", b, err)
	}
}
