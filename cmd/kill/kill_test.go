package kill

import (
	"context"
	"errors"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
)

func TestNewCmdKillFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdKill, []cmdtest.FlagCase[KillOptions]{
		{Args: []string{"3fa9c1"}, Check: func(o *KillOptions) bool { return o.ID == "3fa9c1" && o.Signal == "TERM" && o.Name == "" }},
		{Args: []string{"-n", "web", "--signal", "sigkill", "3fa9c1"}, Check: func(o *KillOptions) bool { return o.ID == "3fa9c1" && o.Signal == "KILL" && o.Name == "web" }},
		{Args: []string{"-s", "9", "x"}, Check: func(o *KillOptions) bool { return o.ID == "x" && o.Signal == "9" }},
		{Args: []string{"--signal", "NOPE", "x"}, WantErr: "unknown signal"},
		{Args: []string{"a/b"}, WantErr: "bad process ID"},
		{Args: nil, WantErr: "accepts 1 arg"},
	})
}

func TestKillRun(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, enginetest.Answer{}, cmdtest.ProcList("abc123", 143))
	if err := killRun(context.Background(), &KillOptions{IO: e.IO, Factory: e.F, Name: "web", ID: "abc123", Signal: "TERM"}); err != nil {
		t.Fatal(err)
	}
	if e.Out.Len() != 0 || e.Err.String() != "sent TERM to process abc123: exited with code 143\n" {
		t.Errorf("stdout %q, stderr %q", e.Out, e.Err)
	}
}

func TestKillRunFailures(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, enginetest.Answer{Code: 4})
	err := killRun(context.Background(), &KillOptions{IO: e.IO, Factory: e.F, Name: "web", ID: "abc123", Signal: "KILL"})
	var exited *proc.AlreadyExitedError
	if !errors.As(err, &exited) || err.Error() != `process "abc123" has already exited` || errs.ExitCode(err) != errs.CodeError {
		t.Errorf("exited: %v (exit %d)", err, errs.ExitCode(err))
	}

	// A sandbox that exists but does not run has no processes to signal.
	e = cmdtest.NewEnv(t, &enginetest.FakeEngine{})
	e.Fake.ContainerInspectFn = cmdtest.Inspect(e.Sandbox(t, "web", container.StateExited, nil))
	err = killRun(context.Background(), &KillOptions{IO: e.IO, Factory: e.F, Name: "web", ID: "abc123", Signal: "TERM"})
	if err == nil || err.Error() != `sandbox "web" is not running (exited); its processes ended when it stopped` || errs.ExitCode(err) != errs.CodeError {
		t.Errorf("stopped: %v (exit %d)", err, errs.ExitCode(err))
	}
}
