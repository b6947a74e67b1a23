package ls

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestLs(t *testing.T) {
	e := cmdtest.NewEnv(t, &enginetest.FakeEngine{})
	e.WriteProject(t, "memory: 1g\n", false)
	list := []container.Summary{cmdtest.Summary(e.Sandbox(t, "web", container.StateRunning, nil)),
		cmdtest.Summary(e.Sandbox(t, "db", container.StateRunning, func(c *config.Config) { c.Memory = 2 << 30 }))}
	e.Fake.ContainerListFn = func(context.Context, container.ListOptions) ([]container.Summary, error) { return list, nil }
	state := &sandbox.StateStore{Dir: cmdutil.StateDir(e.F)}
	if err := state.SetLastUsed("web", e.F.Now().Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}

	if err := lsRun(context.Background(), &LsOptions{IO: e.IO, Factory: e.F}); err != nil {
		t.Fatal(err)
	}
	want := "NAME\tSTATUS\tPROFILE/IMAGE\tWORKSPACE\tAGE\tIDLE\tCONFIG\tSTOPS\n" +
		"db\trunning\tsandbox\tro " + e.Project + "\t1h\t-\tchanged\t-\n" +
		"web\trunning\tsandbox\tro " + e.Project + "\t1h\t10m\tok\t-\n"
	if e.Out.String() != want {
		t.Errorf("piped ls:\n%s\nwant:\n%s", e.Out, want)
	}
	if e.Err.String() != "2 sandboxes (2 running)\n" {
		t.Errorf("footer %q", e.Err)
	}

	e.Out.Reset()
	if err := lsRun(context.Background(), &LsOptions{IO: e.IO, Factory: e.F, JSON: true, Filters: []string{"name=d*"}}); err != nil {
		t.Fatal(err)
	}
	var entries []Entry
	if err := json.Unmarshal(e.Out.Bytes(), &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name != "db" || entries[0].Config != "changed" || strings.Join(entries[0].Changed, ",") != "memory" ||
		entries[0].LastUsedAt != nil || entries[0].Workspace.Mode != config.WorkspaceRO || entries[0].Ports == nil {
		t.Errorf("json: %+v", entries)
	}
}

// A sandbox section makes sandboxes of one project resolve differently: ls must not reuse
// one's resolution for the other.
func TestLsSandboxSections(t *testing.T) {
	e := cmdtest.NewEnv(t, &enginetest.FakeEngine{})
	e.WriteProject(t, "memory: 1g\nsandboxes:\n  big:\n    memory: 2g\n", false)
	for _, tt := range []struct {
		order []string
		want  string
	}{
		{[]string{"big", "small"}, "ok ok"},
		{[]string{"small", "big"}, "ok ok"},
	} {
		var list []container.Summary
		for _, name := range tt.order {
			list = append(list, cmdtest.Summary(e.Sandbox(t, name, container.StateRunning, nil)))
		}
		e.Fake.ContainerListFn = func(context.Context, container.ListOptions) ([]container.Summary, error) { return list, nil }
		e.Out.Reset()
		if err := lsRun(context.Background(), &LsOptions{IO: e.IO, Factory: e.F, JSON: true}); err != nil {
			t.Fatal(err)
		}
		var entries []Entry
		if err := json.Unmarshal(e.Out.Bytes(), &entries); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, entry := range entries {
			got = append(got, entry.Config)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("order %v: config states %v, want %s", tt.order, got, tt.want)
		}
	}
}
