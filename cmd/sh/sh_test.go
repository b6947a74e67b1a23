package sh

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
)

func TestNewCmdShFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdSh, []cmdtest.FlagCase[ShOptions]{
		{Args: []string{"-c", "pwd"}, Check: func(o *ShOptions) bool {
			return o.Script == "pwd" && o.ScriptSet && o.Session == "default" && !o.TimeoutSet && o.Wait == time.Minute && !o.Reset && !o.List
		}},
		{Args: []string{"-c", ""}, Check: func(o *ShOptions) bool { return o.ScriptSet && o.Script == "" }},
		{Args: []string{"-n", "web", "-s", "build", "--timeout", "20m", "--wait", "5s", "-c", "make"}, Check: func(o *ShOptions) bool {
			return o.Name == "web" && o.Session == "build" && o.Timeout == 20*time.Minute && o.TimeoutSet && o.Wait == 5*time.Second
		}},
		{Args: []string{"--timeout", "0", "-c", "x"}, Check: func(o *ShOptions) bool { return o.TimeoutSet && o.Timeout == 0 }},
		{Args: []string{"--reset"}, Check: func(o *ShOptions) bool { return o.Reset && !o.ScriptSet }},
		{Args: []string{"--reset", "-c", "ls"}, Check: func(o *ShOptions) bool { return o.Reset && o.ScriptSet }},
		{Args: []string{"--list", "--json", "-s", "x"}, Check: func(o *ShOptions) bool { return o.List && o.JSON }},
		{Args: nil, WantErr: "give a script with -c"},
		{Args: []string{"--list", "-c", "x"}, WantErr: "--list cannot be combined"},
		{Args: []string{"--list", "--reset"}, WantErr: "--list cannot be combined"},
		{Args: []string{"--json", "-c", "x"}, WantErr: "--json goes with --list"},
		{Args: []string{"--timeout", "-1s", "-c", "x"}, WantErr: "--timeout must not be negative"},
		{Args: []string{"--wait", "0", "-c", "x"}, WantErr: "--wait must be more than 0"},
		{Args: []string{"-s", "../x", "-c", "x"}, WantErr: "bad session name"},
		{Args: []string{"-n", "Bad Name", "-c", "x"}, WantErr: "name"},
		{Args: []string{"-c", "x", "extra"}, WantErr: "unknown command"},
	})
}

func TestAnnounce(t *testing.T) {
	ios, _, _, errOut := iostreams.Test()
	Announce(ios, "build", &proc.ShellResult{Started: "replaced", PrevExit: "137"})
	Announce(ios, "build", &proc.ShellResult{Started: "new"})
	if errOut.String() != "sbx: the shell of session \"build\" had ended (exit status 137); this call ran in a new one, so its directory, variables and functions started afresh\n" {
		t.Errorf("stderr %q", errOut)
	}
	errOut.Reset()
	ios.SetQuiet(true)
	Announce(ios, "build", &proc.ShellResult{ShellExited: true, ExitCode: 1})
	if errOut.Len() != 0 {
		t.Errorf("quiet: %q", errOut)
	}
}

// A session's directory is whatever the sandbox's shell made it: printed, it is escaped.
func TestPrintSessionsEscapesSandboxText(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	entries := []SessionEntry{{Session: "default", State: "idle", Cwd: "/tmp/\x1b]0;pwned\x07\x1b[31mred\u202e", PID: 9, StartedAt: now}}
	for _, tty := range []bool{false, true} {
		ios, _, out, _ := iostreams.Test()
		ios.SetTTY(tty)
		printSessions(ios, entries, now)
		s := out.String()
		if strings.ContainsAny(s, "\x1b\x07\u202e") || !strings.Contains(s, `/tmp/\u001b]0;pwned\u0007\u001b[31mred\u202e`) {
			t.Errorf("tty %v: %q", tty, s)
		}
	}
}

// The exit status of a replaced shell is read from a file in the sandbox.
func TestAnnounceEscapesSandboxText(t *testing.T) {
	ios, _, _, errOut := iostreams.Test()
	Announce(ios, "build", &proc.ShellResult{Started: "replaced", PrevExit: "\x1b]0;pwned\x07"})
	if strings.ContainsAny(errOut.String(), "\x1b\x07") || !strings.Contains(errOut.String(), `(exit status \u001b]0;pwned\u0007)`) {
		t.Errorf("stderr %q", errOut)
	}
}

var markerArg = regexp.MustCompile(`^sbx-[0-9a-f]{32}$`)

// shellAnswers makes the execs of e's fake answer as a session's shell does: out, then the
// trailer with fields, after the marker the call passed.
func shellAnswers(t *testing.T, e *cmdtest.Env, out, fields string) {
	e.Fake.AnswerExecs(func(cmd []string) enginetest.Answer {
		i := slices.IndexFunc(cmd, markerArg.MatchString)
		if i < 0 {
			t.Errorf("no marker in %.300q", cmd)
			return enginetest.Answer{Code: 1}
		}
		return enginetest.Answer{Stdout: strings.NewReader(out + cmd[i] + " " + fields + "\n")}
	})
}

func TestShRun(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	shellAnswers(t, e, "hello\n", "rc=0 start=new")
	opts := &ShOptions{IO: e.IO, Factory: e.F, Name: "web", Session: "default", Script: "echo hello", ScriptSet: true, Wait: time.Minute}
	if err := shRun(context.Background(), opts); err != nil || e.Out.String() != "hello\n" || e.Err.Len() != 0 {
		t.Errorf("err %v, stdout %q, stderr %q", err, e.Out, e.Err)
	}

	// The script's exit status is sbx's; a shell that exited is announced.
	e.Out.Reset()
	shellAnswers(t, e, "", "rc=3 end=died:3")
	opts.Script = "exit 3"
	err := shRun(context.Background(), opts)
	if errs.ExitCode(err) != 3 || e.Out.Len() != 0 {
		t.Errorf("exit: %v (exit %d), stdout %q", err, errs.ExitCode(err), e.Out)
	}
	if e.Err.String() != "sbx: the shell of session \"default\" exited (status 3); the next call starts a new one\n" {
		t.Errorf("stderr %q", e.Err)
	}
}

// A session busy with another call for the whole wait fails with exit 125 and what to do.
func TestShRunBusy(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	shellAnswers(t, e, "", "busy=1")
	err := shRun(context.Background(), &ShOptions{IO: e.IO, Factory: e.F, Name: "web", Session: "build", Script: "make", ScriptSet: true, Wait: time.Second})
	var busy *proc.ShellBusyError
	if !errors.As(err, &busy) || busy.Session != "build" || errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(errs.Hint(err), "--wait") {
		t.Errorf("err %v (exit %d, hint %q)", err, errs.ExitCode(err), errs.Hint(err))
	}
}

// Sessions end with their sandbox: listing those of a missing one is empty, and says why.
func TestShRunListMissingSandbox(t *testing.T) {
	e := cmdtest.NewEnv(t, &enginetest.FakeEngine{ContainerInspectFn: cmdtest.Inspect()})
	if err := shRun(context.Background(), &ShOptions{IO: e.IO, Factory: e.F, Name: "web", List: true, JSON: true}); err != nil {
		t.Fatal(err)
	}
	if e.Out.String() != "[]\n" || e.Err.String() != "sandbox \"web\" not found\n" {
		t.Errorf("stdout %q, stderr %q", e.Out, e.Err)
	}
}
