package exec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func testFactory(env map[string]string) *cmdutil.Factory {
	ios, _, _, _ := iostreams.Test()
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return &cmdutil.Factory{IOStreams: ios, Global: &cmdutil.GlobalOptions{},
		Getenv: func(k string) string { return env[k] }, LookupEnv: lookup, Now: time.Now}
}

func TestNewCmdExecFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
		check   func(*testing.T, *ExecOptions)
	}{
		{args: []string{"--", "python3", "-c", "print(1)"}, check: func(t *testing.T, o *ExecOptions) {
			if strings.Join(o.Command, " ") != "python3 -c print(1)" || o.TimeoutSet {
				t.Errorf("%+v", o)
			}
		}},
		{args: []string{"-n", "web", "-it", "-w", "src", "-e", "A=1", "-e", "B", "-u", "0", "--timeout", "2s", "--", "bash"}, check: func(t *testing.T, o *ExecOptions) {
			if o.Name != "web" || !o.Interactive || !o.TTY || o.WorkDir != "src" || len(o.Env) != 2 || o.User != "0" || o.Timeout != 2*time.Second || !o.TimeoutSet {
				t.Errorf("%+v", o)
			}
		}},
		{args: []string{"ls", "-la"}, check: func(t *testing.T, o *ExecOptions) {
			if strings.Join(o.Command, " ") != "ls -la" {
				t.Errorf("flags after the command belong to it: %v", o.Command)
			}
		}},
		{args: []string{"-d", "--timeout", "1m", "--", "python3", "-m", "http.server"}, check: func(t *testing.T, o *ExecOptions) {
			if !o.Detach || o.Timeout != time.Minute || !o.TimeoutSet || strings.Join(o.Command, " ") != "python3 -m http.server" {
				t.Errorf("%+v", o)
			}
		}},
		{args: []string{"-d", "-i", "--", "cat"}, wantErr: "-d cannot be combined"},
		{args: []string{"-dt", "--", "bash"}, wantErr: "-d cannot be combined"},
		{args: []string{}, wantErr: "requires at least 1 arg"},
		{args: []string{"-n", "Bad Name", "--", "true"}, wantErr: "name"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var got *ExecOptions
			cmd := NewCmdExec(testFactory(nil), func(_ context.Context, o *ExecOptions) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SetOut(os.Stderr)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
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
