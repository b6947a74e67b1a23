package rm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestRmRemovesTheRestWhenOneIsMissing(t *testing.T) {
	e := cmdtest.NewEnv(t, &enginetest.FakeEngine{})
	e.Fake.ContainerInspectFn = cmdtest.Inspect(e.Sandbox(t, "a", container.StateRunning, nil), e.Sandbox(t, "b", container.StateRunning, nil))
	var removed []string
	e.Fake.ContainerRemoveFn = func(_ context.Context, id string, o container.RemoveOptions) error {
		if !o.Force {
			t.Errorf("running sandbox removed without force")
		}
		removed = append(removed, id)
		return nil
	}
	err := rmRun(context.Background(), &RmOptions{IO: e.IO, Factory: e.F, Names: []string{"a", "ghost", "b"}, Force: true})
	if errs.ExitCode(err) != errs.CodeError || !strings.Contains(err.Error(), `sandbox "ghost" not found`) {
		t.Fatalf("err = %v (exit %d)", err, errs.ExitCode(err))
	}
	if strings.Join(removed, ",") != "id-a,id-b" || e.Out.String() != "a\nb\n" {
		t.Errorf("removed %v, stdout %q, stderr %q", removed, e.Out, e.Err)
	}
}

func TestRmEngineDown(t *testing.T) {
	e := cmdtest.NewEnv(t, nil)
	e.F.Engine = func(context.Context) (engine.Engine, error) {
		return nil, engine.Unreachable(engine.Endpoint{Host: "unix:///x.sock", Source: "DOCKER_HOST"}, errors.New("connection refused"))
	}
	err := rmRun(context.Background(), &RmOptions{IO: e.IO, Factory: e.F, Names: []string{"a"}})
	if errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(err.Error(), "unix:///x.sock") {
		t.Fatalf("err = %v", err)
	}
}

func TestRmRunningNeedsForce(t *testing.T) {
	e := cmdtest.WithRunning(t, "a")
	err := rmRun(context.Background(), &RmOptions{IO: e.IO, Factory: e.F, Names: []string{"a"}})
	if err == nil || !strings.Contains(errs.Hint(err), "rm -f") {
		t.Fatalf("err = %v hint %q", err, errs.Hint(err))
	}
}
