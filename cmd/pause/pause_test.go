package pause

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestNewCmdPauseAndResumeFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	for _, build := range []func(*cmdutil.Factory, func(context.Context, *PauseOptions) error) *cobra.Command{NewCmdPause, NewCmdResume} {
		newCmd := func(runF func(context.Context, *PauseOptions) error) *cobra.Command {
			c := build(f, runF)
			c.SetOut(os.Stderr)
			c.SilenceUsage, c.SilenceErrors = true, true
			return c
		}
		var got *PauseOptions
		cmd := newCmd(func(_ context.Context, o *PauseOptions) error { got = o; return nil })
		cmd.SetArgs([]string{"web", "db"})
		if err := cmd.Execute(); err != nil || strings.Join(got.Names, ",") != "web,db" {
			t.Errorf("names: %+v %v", got, err)
		}
		cmd = newCmd(func(_ context.Context, o *PauseOptions) error { got = o; return nil })
		cmd.SetArgs(nil)
		if err := cmd.Execute(); err != nil || len(got.Names) != 1 || got.Names[0] == "" {
			t.Errorf("the project's default sandbox: %+v %v", got, err)
		}
		cmd = newCmd(func(context.Context, *PauseOptions) error { t.Error("ran"); return nil })
		cmd.SetArgs([]string{"Bad Name"})
		if err := cmd.Execute(); errs.ExitCode(err) != errs.CodeUsage {
			t.Errorf("bad name: %v", err)
		}
	}
}

func TestPauseRunAndResumeRun(t *testing.T) {
	status := map[string]container.ContainerState{"web": container.StateRunning, "db": container.StatePaused}
	var paused, unpaused []string
	fake := &enginetest.FakeEngine{T: t,
		ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) {
			name := strings.TrimPrefix(strings.TrimPrefix(id, "sbx-"), "id-")
			st, ok := status[name]
			if !ok {
				return container.InspectResponse{}, cerrdefs.ErrNotFound.WithMessage("No such container")
			}
			return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "id-" + name, State: &container.State{Status: st}},
				Config: &container.Config{Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: name}}}, nil
		},
		ContainerPauseFn: func(_ context.Context, id string) error {
			paused = append(paused, id)
			status[strings.TrimPrefix(id, "id-")] = container.StatePaused
			return nil
		},
		ContainerUnpauseFn: func(_ context.Context, id string) error {
			unpaused = append(unpaused, id)
			status[strings.TrimPrefix(id, "id-")] = container.StateRunning
			return nil
		},
	}
	ios, _, out, errOut := iostreams.Test()
	f := cmdutil.TestFactory(ios, map[string]string{"XDG_STATE_HOME": t.TempDir()}, t.TempDir(), t.TempDir(), time.Now(), fake)

	err := pauseRun(context.Background(), &PauseOptions{IO: ios, Factory: f, Names: []string{"web", "db", "nope"}})
	if errs.ExitCode(err) != errs.CodeError || !strings.Contains(err.Error(), `"nope" not found`) {
		t.Errorf("pause: %v", err)
	}
	if strings.Join(paused, ",") != "id-web" || out.String() != "web\ndb\n" || !strings.Contains(errOut.String(), `sandbox "db" was already paused`) {
		t.Errorf("pause: paused %v stdout %q stderr %q", paused, out, errOut)
	}

	out.Reset()
	if err := resumeRun(context.Background(), &PauseOptions{IO: ios, Factory: f, Names: []string{"web", "db"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(unpaused, ",") != "id-web,id-db" || out.String() != "web\ndb\n" {
		t.Errorf("resume: unpaused %v stdout %q", unpaused, out)
	}
}
