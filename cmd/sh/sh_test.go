package sh

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestNewCmdShFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	for _, tt := range []struct {
		args    []string
		wantErr string
		check   func(*ShOptions) bool
	}{
		{args: []string{"-c", "pwd"}, check: func(o *ShOptions) bool {
			return o.Script == "pwd" && o.ScriptSet && o.Session == "default" && !o.TimeoutSet && o.Wait == time.Minute && !o.Reset && !o.List
		}},
		{args: []string{"-c", ""}, check: func(o *ShOptions) bool { return o.ScriptSet && o.Script == "" }},
		{args: []string{"-n", "web", "-s", "build", "--timeout", "20m", "--wait", "5s", "-c", "make"}, check: func(o *ShOptions) bool {
			return o.Name == "web" && o.Session == "build" && o.Timeout == 20*time.Minute && o.TimeoutSet && o.Wait == 5*time.Second
		}},
		{args: []string{"--timeout", "0", "-c", "x"}, check: func(o *ShOptions) bool { return o.TimeoutSet && o.Timeout == 0 }},
		{args: []string{"--reset"}, check: func(o *ShOptions) bool { return o.Reset && !o.ScriptSet }},
		{args: []string{"--reset", "-c", "ls"}, check: func(o *ShOptions) bool { return o.Reset && o.ScriptSet }},
		{args: []string{"--list", "--json", "-s", "x"}, check: func(o *ShOptions) bool { return o.List && o.JSON }},
		{args: nil, wantErr: "give a script with -c"},
		{args: []string{"--list", "-c", "x"}, wantErr: "--list cannot be combined"},
		{args: []string{"--list", "--reset"}, wantErr: "--list cannot be combined"},
		{args: []string{"--json", "-c", "x"}, wantErr: "--json goes with --list"},
		{args: []string{"--timeout", "-1s", "-c", "x"}, wantErr: "--timeout must not be negative"},
		{args: []string{"--wait", "0", "-c", "x"}, wantErr: "--wait must be more than 0"},
		{args: []string{"-s", "../x", "-c", "x"}, wantErr: "bad session name"},
		{args: []string{"-n", "Bad Name", "-c", "x"}, wantErr: "name"},
		{args: []string{"-c", "x", "extra"}, wantErr: "unknown command"},
	} {
		var got *ShOptions
		cmd := NewCmdSh(f, func(_ context.Context, o *ShOptions) error { got = o; return nil })
		cmd.SetArgs(tt.args)
		cmd.SetOut(os.Stderr)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !tt.check(got) {
			t.Errorf("%v: %+v %v", tt.args, got, err)
		}
	}
}

func TestAnnounce(t *testing.T) {
	ios, _, _, errOut := iostreams.Test()
	Announce(ios, "build", &sandbox.ShellResult{Started: "replaced", PrevExit: "137"})
	Announce(ios, "build", &sandbox.ShellResult{Started: "new"})
	if errOut.String() != "sbx: the shell of session \"build\" had ended (exit status 137); this call ran in a new one, so its directory, variables and functions started afresh\n" {
		t.Errorf("stderr %q", errOut)
	}
	errOut.Reset()
	ios.SetQuiet(true)
	Announce(ios, "build", &sandbox.ShellResult{ShellExited: true, ExitCode: 1})
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
	Announce(ios, "build", &sandbox.ShellResult{Started: "replaced", PrevExit: "\x1b]0;pwned\x07"})
	if strings.ContainsAny(errOut.String(), "\x1b\x07") || !strings.Contains(errOut.String(), `(exit status \u001b]0;pwned\u0007)`) {
		t.Errorf("stderr %q", errOut)
	}
}
