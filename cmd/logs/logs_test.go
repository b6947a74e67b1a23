package logs

import (
	"context"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestNewCmdLogsFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdLogs, []cmdtest.FlagCase[LogsOptions]{
		{Args: []string{"3fa9c1"}, Check: func(o *LogsOptions) bool { return o.ID == "3fa9c1" && o.Tail == -1 && !o.Follow && o.Name == "" }},
		{Args: []string{"-n", "web", "-f", "--tail", "20", "3fa9c1"}, Check: func(o *LogsOptions) bool { return o.Name == "web" && o.Follow && o.Tail == 20 }},
		{Args: []string{"--tail", "0", "x"}, Check: func(o *LogsOptions) bool { return o.Tail == 0 }},
		{Args: nil, WantErr: "accepts 1 arg"},
		{Args: []string{"../x"}, WantErr: "bad process ID"},
		{Args: []string{"--tail", "-2", "x"}, WantErr: "--tail"},
		{Args: []string{"-n", "Bad Name", "x"}, WantErr: "name"},
	})
}

func TestLogsRun(t *testing.T) {
	// The process is looked up, its output shown, and, followed to its end, how it ended.
	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, cmdtest.ProcList("abc123", -1),
		enginetest.Answer{Stdout: strings.NewReader("line 1\n"), Stderr: strings.NewReader("warn\n")},
		cmdtest.ProcList("abc123", 0))
	if err := logsRun(context.Background(), &LogsOptions{IO: e.IO, Factory: e.F, Name: "web", ID: "abc123", Follow: true, Tail: -1}); err != nil {
		t.Fatal(err)
	}
	if e.Out.String() != "line 1\n" || e.Err.String() != "warn\nprocess abc123 exited with code 0\n" {
		t.Errorf("stdout %q, stderr %q", e.Out, e.Err)
	}
}

func TestLogsRunFailures(t *testing.T) {
	// A process the sandbox does not know: exit 1, and where the IDs are.
	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, enginetest.Answer{Code: 3})
	err := logsRun(context.Background(), &LogsOptions{IO: e.IO, Factory: e.F, Name: "web", ID: "abc123", Tail: -1})
	if err == nil || err.Error() != `no process "abc123" in sandbox "web"` || errs.ExitCode(err) != errs.CodeError || !strings.Contains(errs.Hint(err), "sbx ps -n web") {
		t.Errorf("err %v (exit %d, hint %q)", err, errs.ExitCode(err), errs.Hint(err))
	}

	// A sandbox that does not exist.
	e = cmdtest.NewEnv(t, &enginetest.FakeEngine{ContainerInspectFn: cmdtest.Inspect()})
	err = logsRun(context.Background(), &LogsOptions{IO: e.IO, Factory: e.F, Name: "web", ID: "abc123", Tail: -1})
	if !sandbox.IsNotFound(err) || errs.ExitCode(err) != errs.CodeError || !strings.Contains(errs.Hint(err), "sbx ls") || e.Out.Len() != 0 {
		t.Errorf("err %v (exit %d, hint %q), stdout %q", err, errs.ExitCode(err), errs.Hint(err), e.Out)
	}
}
