package ps

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
)

func TestNewCmdPsFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdPs, []cmdtest.FlagCase[PsOptions]{
		{Args: nil, Check: func(o *PsOptions) bool { return o.Name == "" && !o.JSON }},
		{Args: []string{"-n", "web", "--json"}, Check: func(o *PsOptions) bool { return o.Name == "web" && o.JSON }},
		{Args: []string{"extra"}, WantErr: "unknown command"},
		{Args: []string{"-n", "Bad Name"}, WantErr: "name"},
	})
}

func TestEntriesAndState(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	list := []proc.Proc{
		{ID: "a", Command: []string{"sleep", "9"}, State: "running", StartedAt: start, PID: 7},
		{ID: "b", State: "exited", ExitCode: 143, TimedOut: true, StartedAt: start, EndedAt: start.Add(2 * time.Second)},
		{ID: "c", State: "exited", ExitCode: 0, StartedAt: start, EndedAt: start.Add(time.Second)},
		{ID: "d", State: "lost"},
	}
	e := Entries(list, start.Add(time.Minute))
	if e[0].DurationMs != 60000 || e[0].ExitCode != nil || e[0].EndedAt != nil || e[0].PID != 7 {
		t.Errorf("running: %+v", e[0])
	}
	if *e[1].ExitCode != 143 || e[1].DurationMs != 2000 || !e[1].EndedAt.Equal(start.Add(2*time.Second)) {
		t.Errorf("exited: %+v", e[1])
	}
	if e[3].Command == nil {
		t.Error("a missing command must be [] in JSON, not null")
	}
	var states []string
	for _, x := range e {
		states = append(states, StateText(x))
	}
	if got := strings.Join(states, ","); got != "running,timed out (143),exited (0),lost" {
		t.Errorf("states: %s", got)
	}
}

func TestShellJoin(t *testing.T) {
	for args, want := range map[string]string{
		"python3|-m|http.server":   "python3 -m http.server",
		"bash|-c|echo 'hi' $HOME":  `bash -c 'echo '\''hi'\'' $HOME'`,
		"printf|":                  "printf ''",
		"a=b|--x=1,2|/p/q.py|@x%y": "a=b --x=1,2 /p/q.py @x%y",
	} {
		if got := ShellJoin(strings.Split(args, "|")); got != want {
			t.Errorf("%q: %s, want %s", args, got, want)
		}
	}
}

// The command and the ID come from files the sandbox can write: printed, on a terminal or
// piped, they are escaped, never obeyed.
func TestPrintProcsEscapesSandboxText(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	entries := Entries([]proc.Proc{
		{ID: "abc123", Command: []string{"bash", "-c", "sleep 600", "\x1b]0;pwned\x07\x1b[31mred"}, State: "running", StartedAt: start},
		{ID: "\x1b[2Jx", State: "lost", StartedAt: start},
	}, start.Add(time.Minute))
	for _, tty := range []bool{false, true} {
		ios, _, out, _ := iostreams.Test()
		ios.SetTTY(tty)
		printProcs(ios, entries)
		s := out.String()
		if strings.ContainsAny(s, "\x1b\x07") {
			t.Errorf("tty %v: control characters printed: %q", tty, s)
		}
		for _, want := range []string{`'\u001b]0;pwned\u0007\u001b[31mred'`, `\u001b[2Jx`} {
			if !strings.Contains(s, want) {
				t.Errorf("tty %v: %q lacks %q", tty, s, want)
			}
		}
		// A record whose command sbx could not read shows that it is unknown.
		if last := strings.Split(strings.TrimSpace(s), "\n")[2]; !strings.Contains(last, "?") {
			t.Errorf("tty %v: unknown command shown as %q", tty, last)
		}
	}
}

func TestPsRun(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, cmdtest.ProcList("abc123", -1))
	if err := psRun(context.Background(), &PsOptions{IO: e.IO, Factory: e.F, Name: "web", JSON: true}); err != nil {
		t.Fatal(err)
	}
	var got []Entry
	if err := json.Unmarshal(e.Out.Bytes(), &got); err != nil || len(got) != 1 || got[0].ID != "abc123" || got[0].State != "running" ||
		got[0].PID != 7 || ShellJoin(got[0].Command) != "sleep 60" || got[0].ExitCode != nil {
		t.Errorf("%v: %s", err, e.Out)
	}
}

// Nothing runs in a sandbox that does not exist or does not run: an empty list, and why on
// stderr. An engine error is an error.
func TestPsRunWithoutProcesses(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status container.ContainerState // "" for none
		stderr string
	}{
		{"missing", "", `sandbox "web" not found`},
		{"stopped", container.StateExited, `sandbox "web" is not running (exited); its processes ended when it stopped`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := cmdtest.NewEnv(t, &enginetest.FakeEngine{})
			var boxes []container.InspectResponse
			if tt.status != "" {
				boxes = append(boxes, e.Sandbox(t, "web", tt.status, nil))
			}
			e.Fake.ContainerInspectFn = cmdtest.Inspect(boxes...)
			if err := psRun(context.Background(), &PsOptions{IO: e.IO, Factory: e.F, Name: "web", JSON: true}); err != nil {
				t.Fatal(err)
			}
			if e.Out.String() != "[]\n" || e.Err.String() != tt.stderr+"\n" {
				t.Errorf("stdout %q, stderr %q", e.Out, e.Err)
			}
		})
	}

	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, enginetest.Answer{Code: 2})
	err := psRun(context.Background(), &PsOptions{IO: e.IO, Factory: e.F, Name: "web"})
	if err == nil || err.Error() != `listing the processes of sandbox "web": exit 2` || errs.ExitCode(err) != errs.CodeFailure || e.Out.Len() != 0 {
		t.Errorf("err %v (exit %d), stdout %q", err, errs.ExitCode(err), e.Out)
	}
}
