package exec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
)

func testFactory(env map[string]string) *cmdutil.Factory {
	ios, _, _, _ := iostreams.Test()
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return &cmdutil.Factory{IOStreams: ios, Global: &cmdutil.GlobalOptions{},
		Getenv: func(k string) string { return env[k] }, LookupEnv: lookup, Now: time.Now}
}

func TestNewCmdExecFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdExec, []cmdtest.FlagCase[ExecOptions]{
		{Args: []string{"--", "python3", "-c", "print(1)"}, Check: func(o *ExecOptions) bool {
			return strings.Join(o.Command, " ") == "python3 -c print(1)" && !o.TimeoutSet
		}},
		{Args: []string{"-n", "web", "-it", "-w", "src", "-e", "A=1", "-e", "B", "-u", "0", "--timeout", "2s", "--", "bash"}, Check: func(o *ExecOptions) bool {
			return o.Name == "web" && o.Interactive && o.TTY && o.WorkDir == "src" && len(o.Env) == 2 && o.User == "0" && o.Timeout == 2*time.Second && o.TimeoutSet
		}},
		// Flags after the command belong to it.
		{Args: []string{"ls", "-la"}, Check: func(o *ExecOptions) bool { return strings.Join(o.Command, " ") == "ls -la" }},
		{Args: []string{"-d", "--timeout", "1m", "--", "python3", "-m", "http.server"}, Check: func(o *ExecOptions) bool {
			return o.Detach && o.Timeout == time.Minute && o.TimeoutSet && strings.Join(o.Command, " ") == "python3 -m http.server"
		}},
		{Args: []string{"-d", "--wait-port", "8000", "--", "python3", "-m", "http.server"}, Check: func(o *ExecOptions) bool {
			return o.Detach && o.WaitPort == 8000 && o.WaitTimeout == time.Minute
		}},
		{Args: []string{"-d", "--wait-port", "8000", "--wait-timeout", "5s", "--", "srv"}, Check: func(o *ExecOptions) bool {
			return o.WaitPort == 8000 && o.WaitTimeout == 5*time.Second
		}},
		{Args: []string{"--wait-port", "8000", "--", "srv"}, WantErr: "--wait-port and --wait-timeout need -d"},
		{Args: []string{"-d", "--wait-port", "0", "--", "srv"}, WantErr: "bad --wait-port 0"},
		{Args: []string{"-d", "--wait-port", "70000", "--", "srv"}, WantErr: "bad --wait-port 70000"},
		{Args: []string{"-d", "--wait-port", "80", "--wait-timeout", "0s", "--", "srv"}, WantErr: "--wait-timeout needs a positive duration"},
		{Args: []string{"-d", "-i", "--", "cat"}, WantErr: "-d cannot be combined"},
		{Args: []string{"-dt", "--", "bash"}, WantErr: "-d cannot be combined"},
		{Args: []string{}, WantErr: "requires at least 1 arg"},
		{Args: []string{"-n", "Bad Name", "--", "true"}, WantErr: "name"},
	})
}

func TestExecEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "vars")
	if err := os.WriteFile(file, []byte("# comment\nFROM_FILE=1\n\nOVERRIDE=file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := testFactory(map[string]string{"PASSED": "p", "HOSTONLY": "h", "PATH": "/host/bin"})
	r := &config.Resolved{Config: config.Config{PassEnv: []string{"PASSED", "UNSET"}}}
	env, err := execEnv(f, r, &ExecOptions{EnvFiles: []string{file}, Env: []string{"OVERRIDE=flag", "HOSTONLY", "MISSING"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(env, " "); got != "PASSED=p FROM_FILE=1 OVERRIDE=file OVERRIDE=flag HOSTONLY=h" {
		t.Errorf("env = %s", got)
	}
	if _, err := execEnv(f, r, &ExecOptions{Env: []string{"=x"}}); errs.ExitCode(err) != errs.CodeUsage {
		t.Errorf("bad -e: %v", err)
	}
	if err := os.WriteFile(file, []byte("novalue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execEnv(f, r, &ExecOptions{EnvFiles: []string{file}}); err == nil || !strings.Contains(err.Error(), "vars:1") {
		t.Errorf("bad env file line: %v", err)
	}
}

func TestExecRun(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	var ran []string
	e.Fake.AnswerExecs(func(cmd []string) enginetest.Answer {
		ran = cmd
		return enginetest.Answer{Stdout: strings.NewReader("42\n"), Stderr: strings.NewReader("note\n")}
	})
	err := execRun(context.Background(), &ExecOptions{IO: e.IO, Factory: e.F, Name: "web", Command: []string{"python3", "-c", "print(6*7)"}})
	if err != nil || e.Out.String() != "42\n" || e.Err.String() != "note\n" {
		t.Fatalf("err %v, stdout %q, stderr %q", err, e.Out, e.Err)
	}
	if !strings.HasSuffix(strings.Join(ran, " "), " python3 -c print(6*7)") {
		t.Errorf("ran %q", ran)
	}

	// The command's own exit code is sbx's, with nothing printed.
	e.Fake.AnswerExecs(func([]string) enginetest.Answer { return enginetest.Answer{Code: 3} })
	err = execRun(context.Background(), &ExecOptions{IO: e.IO, Factory: e.F, Name: "web", Command: []string{"false"}})
	var exit *errs.ExitError
	if !errors.As(err, &exit) || errs.ExitCode(err) != 3 {
		t.Errorf("exit 3: %v (exit %d)", err, errs.ExitCode(err))
	}
}

func TestExecRunDetached(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, enginetest.Answer{})
	err := execRun(context.Background(), &ExecOptions{IO: e.IO, Factory: e.F, Name: "web", Detach: true, Command: []string{"sleep", "60"}})
	id := strings.TrimSuffix(e.Out.String(), "\n")
	if err != nil || proc.ValidID(id) != nil {
		t.Fatalf("err %v, stdout %q", err, e.Out)
	}
	if want := `started process ` + id + ` in sandbox "web"; its output: sbx logs -n web ` + id + "\n"; e.Err.String() != want {
		t.Errorf("stderr %q, want %q", e.Err, want)
	}
}

func TestExecRunFailures(t *testing.T) {
	// An engine error is wrapped with what sbx was doing, exit 125.
	fake := &enginetest.FakeEngine{ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		return container.InspectResponse{}, errors.New("error during connect: EOF")
	}}
	e := cmdtest.NewEnv(t, fake)
	err := execRun(context.Background(), &ExecOptions{IO: e.IO, Factory: e.F, Name: "web", Command: []string{"true"}})
	if err == nil || err.Error() != `inspecting sandbox "web": error during connect: EOF` || errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("engine error: %v (exit %d)", err, errs.ExitCode(err))
	}

	// A policy that denies exec refuses before the engine is dialled.
	e = cmdtest.NewEnv(t, nil)
	e.WriteProject(t, "tools:\n  deny: [exec]\n", false)
	err = execRun(context.Background(), &ExecOptions{IO: e.IO, Factory: e.F, Command: []string{"true"}})
	var pe *config.PolicyError
	if !errors.As(err, &pe) || errs.ExitCode(err) != errs.CodeFailure || e.Out.Len() != 0 {
		t.Errorf("denied: %v (exit %d), stdout %q", err, errs.ExitCode(err), e.Out)
	}
}
