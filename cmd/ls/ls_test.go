package ls

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// summaryFor makes the engine's list entry of a sandbox created from project's resolved config.
func summaryFor(t *testing.T, f *cmdutil.Factory, project, name string, memory int64) container.Summary {
	t.Helper()
	f.Global.ProjectDir = project
	r, err := cmdutil.ResolveConfig(f, name)
	f.Global.ProjectDir = ""
	if err != nil {
		t.Fatal(err)
	}
	r.Config.Memory = memory
	spec, err := sandbox.BuildSpec(sandbox.SpecInput{Name: name, ProjectRoot: r.ProjectRoot, Config: r.Config, CreatedAt: now.Add(-3 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return container.Summary{ID: "id-" + name, Names: []string{"/" + spec.ContainerName}, Image: r.Config.Image, State: container.StateRunning, Labels: spec.Container.Labels}
}

func TestLs(t *testing.T) {
	home, project := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(project, ".sbx.yaml"), []byte("memory: 1g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ios, _, out, errOut := iostreams.Test()
	fake := &enginetest.FakeEngine{T: t}
	f := cmdutil.TestFactory(ios, map[string]string{"XDG_STATE_HOME": filepath.Join(home, "state")}, home, project, now, fake)
	list := []container.Summary{summaryFor(t, f, project, "web", 1<<30), summaryFor(t, f, project, "db", 2<<30)}
	fake.ContainerListFn = func(context.Context, container.ListOptions) ([]container.Summary, error) { return list, nil }
	state := &sandbox.StateStore{Dir: filepath.Join(home, "state", "sbx")}
	if err := state.SetLastUsed("web", now.Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}

	if err := lsRun(context.Background(), &LsOptions{IO: ios, Factory: f}); err != nil {
		t.Fatal(err)
	}
	want := "NAME\tSTATUS\tPROFILE/IMAGE\tWORKSPACE\tAGE\tIDLE\tCONFIG\n" +
		"db\trunning\tsandbox\tro " + project + "\t3h\t-\tchanged\n" +
		"web\trunning\tsandbox\tro " + project + "\t3h\t10m\tok\n"
	if out.String() != want {
		t.Errorf("piped ls:\n%s\nwant:\n%s", out, want)
	}
	if errOut.String() != "2 sandboxes (2 running)\n" {
		t.Errorf("footer %q", errOut)
	}

	out.Reset()
	if err := lsRun(context.Background(), &LsOptions{IO: ios, Factory: f, JSON: true, Filters: []string{"name=d*"}}); err != nil {
		t.Fatal(err)
	}
	var entries []Entry
	if err := json.Unmarshal(out.Bytes(), &entries); err != nil {
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
	home, project := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(project, ".sbx.yaml"), []byte("memory: 1g\nsandboxes:\n  big:\n    memory: 2g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ios, _, out, _ := iostreams.Test()
	fake := &enginetest.FakeEngine{T: t}
	f := cmdutil.TestFactory(ios, map[string]string{"XDG_STATE_HOME": filepath.Join(home, "state")}, home, project, now, fake)
	for _, tt := range []struct {
		order []string
		want  string
	}{
		{[]string{"big", "small"}, "ok ok"},
		{[]string{"small", "big"}, "ok ok"},
	} {
		var list []container.Summary
		for _, name := range tt.order {
			memory := int64(1 << 30)
			if name == "big" {
				memory = 2 << 30
			}
			list = append(list, summaryFor(t, f, project, name, memory))
		}
		fake.ContainerListFn = func(context.Context, container.ListOptions) ([]container.Summary, error) { return list, nil }
		out.Reset()
		if err := lsRun(context.Background(), &LsOptions{IO: ios, Factory: f, JSON: true}); err != nil {
			t.Fatal(err)
		}
		var entries []Entry
		if err := json.Unmarshal(out.Bytes(), &entries); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Config)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("order %v: config states %v, want %s", tt.order, got, tt.want)
		}
	}
}
