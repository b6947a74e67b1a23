package pause

import (
	"context"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestNewCmdPauseAndResumeFlags(t *testing.T) {
	for name, build := range map[string]func(*cmdutil.Factory, func(context.Context, *PauseOptions) error) *cobra.Command{"pause": NewCmdPause, "resume": NewCmdResume} {
		t.Run(name, func(t *testing.T) {
			cmdtest.Flags(t, build, []cmdtest.FlagCase[PauseOptions]{
				{Args: []string{"web", "db"}, Check: func(o *PauseOptions) bool { return strings.Join(o.Names, ",") == "web,db" }},
				// The project's default sandbox.
				{Args: nil, Check: func(o *PauseOptions) bool { return len(o.Names) == 1 && o.Names[0] != "" }},
				{Args: []string{"Bad Name"}, WantErr: "name", Code: errs.CodeUsage},
			})
		})
	}
}

func TestPauseRunAndResumeRun(t *testing.T) {
	status := map[string]container.ContainerState{"web": container.StateRunning, "db": container.StatePaused}
	var paused, unpaused []string
	fake := &enginetest.FakeEngine{
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
	e := cmdtest.NewEnv(t, fake)

	err := pauseRun(context.Background(), &PauseOptions{IO: e.IO, Factory: e.F, Names: []string{"web", "db", "nope"}})
	if errs.ExitCode(err) != errs.CodeError || !strings.Contains(err.Error(), `"nope" not found`) {
		t.Errorf("pause: %v", err)
	}
	if strings.Join(paused, ",") != "id-web" || e.Out.String() != "web\ndb\n" || !strings.Contains(e.Err.String(), `sandbox "db" was already paused`) {
		t.Errorf("pause: paused %v stdout %q stderr %q", paused, e.Out, e.Err)
	}

	e.Out.Reset()
	if err := resumeRun(context.Background(), &PauseOptions{IO: e.IO, Factory: e.F, Names: []string{"web", "db"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(unpaused, ",") != "id-web,id-db" || e.Out.String() != "web\ndb\n" {
		t.Errorf("resume: unpaused %v stdout %q", unpaused, e.Out)
	}
}
