package stop

import (
	"context"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// stopEnv has sandboxes web and db running; the engine refuses to stop db, which is being removed.
func stopEnv(t *testing.T) (*cmdtest.Env, *[]string) {
	fake := &enginetest.FakeEngine{}
	e := cmdtest.NewEnv(t, fake)
	fake.ContainerInspectFn = cmdtest.Inspect(e.Sandbox(t, "web", container.StateRunning, nil), e.Sandbox(t, "db", container.StateRunning, nil))
	var stopped []string
	fake.ContainerStopFn = func(_ context.Context, id string, _ container.StopOptions) error {
		if id == "id-db" {
			return cerrdefs.ErrConflict.WithMessage("cannot stop container id-db: it is being removed")
		}
		stopped = append(stopped, id)
		return nil
	}
	return e, &stopped
}

func TestStopRun(t *testing.T) {
	e, stopped := stopEnv(t)
	if err := stopRun(context.Background(), &StopOptions{IO: e.IO, Factory: e.F, Names: []string{"web"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(*stopped, ",") != "id-web" || e.Out.String() != "web\n" || e.Err.Len() != 0 {
		t.Errorf("stopped %v, stdout %q, stderr %q", *stopped, e.Out, e.Err)
	}
}

// Each name is stopped or reported; the exit code is the worst failure's class.
func TestStopRunFailures(t *testing.T) {
	e, stopped := stopEnv(t)
	err := stopRun(context.Background(), &StopOptions{IO: e.IO, Factory: e.F, Names: []string{"ghost"}})
	if err == nil || err.Error() != `sandbox "ghost" not found` || errs.ExitCode(err) != errs.CodeError || !strings.Contains(errs.Hint(err), "sbx ls") {
		t.Errorf("missing sandbox: %v (exit %d, hint %q)", err, errs.ExitCode(err), errs.Hint(err))
	}

	err = stopRun(context.Background(), &StopOptions{IO: e.IO, Factory: e.F, Names: []string{"ghost", "web", "db"}})
	if err == nil || err.Error() != `stopping sandbox "db": cannot stop container id-db: it is being removed` || errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("engine failure: %v (exit %d)", err, errs.ExitCode(err))
	}
	if strings.Join(*stopped, ",") != "id-web" || e.Out.String() != "web\n" || e.Err.String() != "error: sandbox \"ghost\" not found\n" {
		t.Errorf("stopped %v, stdout %q, stderr %q", *stopped, e.Out, e.Err)
	}
}
