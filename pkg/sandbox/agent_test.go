package sandbox

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent"
)

// What the agent is asked for each kind of command: how a client that goes away is taken,
// whether what the command starts is its own to end, and its timeout.
func TestAgentRequest(t *testing.T) {
	cmd := []string{"bash", "-c", "x"}
	for _, tt := range []struct {
		name           string
		opts           ExecOptions
		size           *[2]uint
		strict         agent.Strict
		reap           bool
		timeout, grace time.Duration
	}{
		{"plain", ExecOptions{Timeout: time.Second}, nil, agent.StrictNone, true, time.Second, KillGrace},
		{"a stream in", ExecOptions{strictStdin: true, Interactive: true}, nil, agent.StrictStdin, true, 0, KillGrace},
		{"-i", ExecOptions{Interactive: true, TTY: true}, &[2]uint{24, 80}, agent.StrictExit, true, 0, KillGrace},
		{"detached", ExecOptions{detach: true, Interactive: true, Timeout: time.Second}, nil, agent.StrictNone, false, 0, KillGrace},
		{"a launcher", ExecOptions{outlive: true, Timeout: time.Second, grace: time.Millisecond}, nil, agent.StrictNone, false, time.Second, time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.WorkDir, tt.opts.Env = "/w", []string{"A=1"}
			got := agentRequest(tt.opts, cmd, tt.size)
			want := agent.Request{TTY: tt.opts.TTY, Strict: tt.strict, Timeout: tt.timeout, Grace: tt.grace, Reap: tt.reap,
				Dir: "/w", Argv: cmd, Env: []string{"A=1"}}
			if tt.size != nil {
				want.Rows, want.Cols = tt.size[0], tt.size[1]
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// The agent's directory must not let other host users reach handoff.sock, which anyone may
// open: the directory above is made private, even if it was made open before. The agent's
// own directory is open to the sandbox user only to reach handoff.sock (0755), except for a
// sandbox of an older sbx, whose agent binds its own socket there (0777).
func TestPrepareAgentDirIsPrivate(t *testing.T) {
	state := t.TempDir()
	parent := filepath.Join(state, "agent")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, legacy := filepath.Join(parent, "web"), filepath.Join(parent, "old")
	if err := prepareAgentDir("web", dir, false); err != nil {
		t.Fatal(err)
	}
	if err := prepareAgentDir("old", legacy, true); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{parent: 0o700, dir: 0o755, legacy: 0o777} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", path, fi.Mode().Perm(), want)
		}
	}
}
