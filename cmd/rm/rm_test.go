package rm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func managed(name string) container.InspectResponse {
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: "id-" + name, State: &container.State{Status: container.StateRunning}},
		Config:            &container.Config{Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: name, sandbox.LabelWorkspace: "ro"}},
	}
}

func TestRmRemovesTheRestWhenOneIsMissing(t *testing.T) {
	ios, _, out, errOut := iostreams.Test()
	var removed []string
	fake := &enginetest.FakeEngine{T: t,
		ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) {
			if id == "sbx-ghost" {
				return container.InspectResponse{}, cerrdefs.ErrNotFound
			}
			return managed(strings.TrimPrefix(id, "sbx-")), nil
		},
		ContainerRemoveFn: func(_ context.Context, id string, o container.RemoveOptions) error {
			if !o.Force {
				t.Errorf("running sandbox removed without force")
			}
			removed = append(removed, id)
			return nil
		},
	}
	f := cmdutil.TestFactory(ios, map[string]string{"XDG_STATE_HOME": t.TempDir()}, t.TempDir(), t.TempDir(), time.Now(), fake)
	err := rmRun(context.Background(), &RmOptions{IO: ios, Factory: f, Names: []string{"a", "ghost", "b"}, Force: true})
	if errs.ExitCode(err) != errs.CodeError || !strings.Contains(err.Error(), `sandbox "ghost" not found`) {
		t.Fatalf("err = %v (exit %d)", err, errs.ExitCode(err))
	}
	if strings.Join(removed, ",") != "id-a,id-b" || out.String() != "a\nb\n" {
		t.Errorf("removed %v, stdout %q, stderr %q", removed, out, errOut)
	}
}

func TestRmEngineDown(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	f.Engine = func(context.Context) (engine.Engine, error) {
		return nil, engine.Unreachable(engine.Endpoint{Host: "unix:///x.sock", Source: "DOCKER_HOST"}, errors.New("connection refused"))
	}
	err := rmRun(context.Background(), &RmOptions{IO: ios, Factory: f, Names: []string{"a"}})
	if errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(err.Error(), "unix:///x.sock") {
		t.Fatalf("err = %v", err)
	}
}

func TestRmRunningNeedsForce(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	fake := &enginetest.FakeEngine{T: t,
		ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) { return managed("a"), nil },
	}
	f := cmdutil.TestFactory(ios, map[string]string{"XDG_STATE_HOME": t.TempDir()}, t.TempDir(), t.TempDir(), time.Now(), fake)
	err := rmRun(context.Background(), &RmOptions{IO: ios, Factory: f, Names: []string{"a"}})
	if err == nil || !strings.Contains(errs.Hint(err), "rm -f") {
		t.Fatalf("err = %v hint %q", err, errs.Hint(err))
	}
}
