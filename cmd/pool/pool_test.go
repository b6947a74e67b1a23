package pool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int // 0: the run function gets the options
	}{
		{[]string{"--all", "-n", "x"}, errs.CodeUsage},
		{[]string{"-n", "Bad_Name"}, errs.CodeUsage},
		{[]string{"--all", "--json"}, 0},
		{[]string{"-n", "web"}, 0},
	} {
		e := cmdtest.NewEnv(t, nil)
		var got *Options
		cmd := NewCmdLs(e.F, func(_ context.Context, o *Options) error { got = o; return nil })
		cmd.SetArgs(tc.args)
		cmd.SetOut(e.Out)
		cmd.SetErr(e.Err)
		err := cmd.Execute()
		switch {
		case tc.code != 0 && errs.ExitCode(err) != tc.code:
			t.Errorf("%v: %v (exit %d), want exit %d", tc.args, err, errs.ExitCode(err), tc.code)
		case tc.code == 0 && (err != nil || got == nil):
			t.Errorf("%v: %v", tc.args, err)
		case tc.code == 0 && (got.All != slices.Contains(tc.args, "--all") || got.JSON != slices.Contains(tc.args, "--json")):
			t.Errorf("%v: options %+v", tc.args, got)
		}
	}
}

// A configuration that mounts the project is refused before anything is made.
func TestFillRefusesProjectMounts(t *testing.T) {
	e := cmdtest.NewEnv(t, &enginetest.FakeEngine{})
	e.Vars["SBX_POOL"] = "1"
	err := fillRun(context.Background(), &Options{IO: e.IO, Factory: e.F})
	if errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(err.Error(), "workspace ro mounts the project") ||
		!strings.Contains(errs.Hint(err), "workspace: none") {
		t.Errorf("fill with workspace ro: %v (hint %q)", err, errs.Hint(err))
	}
}

func TestLs(t *testing.T) {
	e := cmdtest.NewEnv(t, &enginetest.FakeEngine{})
	const name = "pool-0123456789"
	labels := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: name, sandbox.LabelPool: "k1",
		sandbox.LabelProject: "/src/app", sandbox.LabelConfigHash: "h1", sandbox.LabelCreatedAt: "2026-11-30T12:00:00Z"}
	e.Fake.ContainerListFn = func(context.Context, container.ListOptions) ([]container.Summary, error) {
		return []container.Summary{
			{ID: "c1", Names: []string{"/sbx-" + name}, Labels: labels, State: container.StateRunning, Image: "sbx-sandbox:bookworm-slim"},
			// Claimed: renamed, so no longer pooled.
			{ID: "c2", Names: []string{"/sbx-web"}, Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: "pool-9999999999", sandbox.LabelPool: "k1"}},
		}, nil
	}
	dir := filepath.Join(cmdutil.StateDir(e.F), "pool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{name, "pool-9999999999"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("k1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := lsRun(context.Background(), &Options{IO: e.IO, Factory: e.F, All: true}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(e.Out.String(), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "NAME\tKEY\tSTATUS\tAGE\tIMAGE\tPROJECT" ||
		!strings.HasPrefix(lines[1], name+"\tk1\trunning\t") || !strings.HasSuffix(lines[1], "\tsbx-sandbox:bookworm-slim\t/src/app") {
		t.Errorf("ls, piped:\n%s", e.Out)
	}
	e.Out.Reset()
	if err := lsRun(context.Background(), &Options{IO: e.IO, Factory: e.F, All: true, JSON: true}); err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal(e.Out.Bytes(), &list); err != nil || len(list) != 1 {
		t.Fatalf("ls --json: %s %v", e.Out, err)
	}
	for _, k := range []string{"name", "id", "key", "status", "image", "project", "configHash", "createdAt"} {
		if _, ok := list[0][k]; !ok {
			t.Errorf("ls --json lacks %q: %v", k, list[0])
		}
	}
}
