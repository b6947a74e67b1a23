package cmdutil

import (
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestWorkDir(t *testing.T) {
	r := &config.Resolved{ProjectRoot: "/src/app", Config: config.Config{Workspace: "ro"}}
	for _, tt := range []struct {
		wd, flag, mode, want string
	}{
		{"/src/app", "", "ro", "/workspace"},
		{"/src/app/pkg/x", "", "ro", "/workspace/pkg/x"},
		{"/elsewhere", "", "rw", "/workspace"},
		{"/src/app/pkg", "", "none", "/workspace"},
		{"/src/app/pkg", "/tmp", "ro", "/tmp"},
		{"/src/app/pkg", "sub", "ro", "/workspace/sub"},
	} {
		r.WorkingDir, r.Config.Workspace = tt.wd, tt.mode
		if got := WorkDir(tt.flag, r); got != tt.want {
			t.Errorf("cwd %s -w %q mode %s: %s, want %s", tt.wd, tt.flag, tt.mode, got, tt.want)
		}
	}
}

func TestExitFor(t *testing.T) {
	r := &config.Resolved{Config: config.Config{Memory: 64 << 20, Timeout: time.Minute}, Sources: map[string]config.Source{}}
	for _, tt := range []struct {
		res      sandbox.ExecResult
		wantCode int
		wantMsg  string
	}{
		{sandbox.ExecResult{ExitCode: 0}, 0, ""},
		{sandbox.ExecResult{ExitCode: 3}, 3, ""},
		{sandbox.ExecResult{ExitCode: 127}, 127, ""},
		{sandbox.ExecResult{ExitCode: 143, TimedOut: true}, 124, "timed out after 2s"},
		{sandbox.ExecResult{ExitCode: 137, OOMKilled: true}, 137, "killed: out of memory, limit 64m"},
		{sandbox.ExecResult{ExitCode: 143, Canceled: true}, 130, "interrupted"},
		{sandbox.ExecResult{ExitCode: 137, TimedOut: true, LeftRunning: true}, 124, "timed out after 2s; sbx could not end the command"},
		{sandbox.ExecResult{ExitCode: 137, Canceled: true, LeftRunning: true}, 130, "interrupted; sbx could not end the command"},
	} {
		err := ExitFor(&tt.res, 2*time.Second, r)
		if code := errs.ExitCode(err); code != tt.wantCode {
			t.Errorf("%+v: exit %d, want %d", tt.res, code, tt.wantCode)
		}
		if tt.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.wantMsg)) {
			t.Errorf("%+v: message %v, want %q", tt.res, err, tt.wantMsg)
		}
	}
}

func TestShellExitFor(t *testing.T) {
	r := &config.Resolved{Config: config.Defaults(), Sources: map[string]config.Source{}}
	for _, tt := range []struct {
		res  proc.ShellResult
		code int
		msg  string
	}{
		{proc.ShellResult{}, 0, ""},
		{proc.ShellResult{ExitCode: 3}, 3, ""},
		{proc.ShellResult{ExitCode: 3, ShellExited: true}, 3, ""},
		{proc.ShellResult{ExitCode: 130, TimedOut: true}, errs.CodeTimeout, "timed out after 2s"},
		{proc.ShellResult{Canceled: true, ExitCode: 130}, errs.CodeInterrupted, "interrupted"},
	} {
		err := ShellExitFor(&tt.res, 2*time.Second, r)
		if errs.ExitCode(err) != tt.code || (tt.msg != "" && !strings.Contains(err.Error(), tt.msg)) {
			t.Errorf("%+v: %v (exit %d)", tt.res, err, errs.ExitCode(err))
		}
	}
}

// The timeout hint names the timeout that ran out: --timeout's when that set another one.
func TestTimeoutHintNamesItsSource(t *testing.T) {
	r := &config.Resolved{Config: config.Config{Timeout: 10 * time.Minute}, Sources: map[string]config.Source{"timeout": {Layer: config.LayerDefault}}}
	res := &sandbox.ExecResult{ExitCode: 143, TimedOut: true}
	for _, tt := range []struct {
		timeout time.Duration
		want    string
	}{
		{2 * time.Second, "give it longer with --timeout (now 2s, from --timeout)"},
		{10 * time.Minute, "give it longer with --timeout, or set the timeout key (now 10m, from default)"},
	} {
		if got := errs.Hint(ExitFor(res, tt.timeout, r)); got != tt.want {
			t.Errorf("timeout %s: hint %q, want %q", tt.timeout, got, tt.want)
		}
		if got := errs.Hint(ShellExitFor(&proc.ShellResult{TimedOut: true}, tt.timeout, r)); got != tt.want {
			t.Errorf("sh, timeout %s: hint %q, want %q", tt.timeout, got, tt.want)
		}
	}
}
