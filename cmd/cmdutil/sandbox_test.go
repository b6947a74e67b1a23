package cmdutil

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// LiveState reports what the engine says, and whether the sandbox is current by
// sandbox.Resolver.Drift, with the command that applies the resolved config.
func TestLiveState(t *testing.T) {
	project := t.TempDir()
	write := func(text string) {
		if err := os.WriteFile(filepath.Join(project, config.ProjectFileName), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory: 512m\n")
	var labels map[string]string // the sandbox's; nil while there is none
	fake := &enginetest.FakeEngine{T: t, ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		if labels == nil {
			return container.InspectResponse{}, cerrdefs.ErrNotFound
		}
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "c1", State: &container.State{Status: container.StateRunning}},
			Config: &container.Config{Labels: labels}}, nil
	}}
	fake.Docker()
	ios, _, _, _ := iostreams.Test()
	f := TestFactory(ios, map[string]string{"XDG_STATE_HOME": t.TempDir()}, t.TempDir(), project, time.Now(), fake)
	live := func() *config.Resolved {
		t.Helper()
		r, err := ResolveConfig(f, "web")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	r := live()
	if l, err := LiveState(context.Background(), f, r); err != nil || !l.Reachable || l.Exists || l.ApplyCommand != "sbx create -n web" || l.Kind != "rootful Docker 20.10.24 (cgroup v2)" || l.LimitsProblem != "" {
		t.Errorf("no sandbox: %+v %v", l, err)
	}
	in, err := Resolver(f).SpecInput(r)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := sandbox.BuildSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	labels = spec.Container.Labels
	if l, err := LiveState(context.Background(), f, r); err != nil || !l.Exists || !l.Running || !l.HashMatches || l.ApplyCommand != "" {
		t.Errorf("current: %+v %v", l, err)
	}
	write("memory: 768m\n")
	l, err := LiveState(context.Background(), f, live())
	if err != nil || l.HashMatches || !slices.Equal(l.DifferingKeys, []string{"memory", "memorySwap"}) || l.ApplyCommand != "sbx create -n web --replace" {
		t.Errorf("changed: %+v %v", l, err)
	}

	f.Engine = func(context.Context) (engine.Engine, error) { return nil, errors.New("no engine here") }
	if l, err := LiveState(context.Background(), f, r); err != nil || l.Reachable || l.Error != "no engine here" {
		t.Errorf("unreachable: %+v %v", l, err)
	}
}
