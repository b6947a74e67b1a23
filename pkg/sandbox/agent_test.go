package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
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
		{"a stream in", ExecOptions{StrictStdin: true, Interactive: true}, nil, agent.StrictStdin, true, 0, KillGrace},
		{"-i", ExecOptions{Interactive: true, TTY: true}, &[2]uint{24, 80}, agent.StrictExit, true, 0, KillGrace},
		{"detached", ExecOptions{Launcher: "proc_launch.sh", Interactive: true, Timeout: time.Second}, nil, agent.StrictNone, false, 0, KillGrace},
		{"an outliving script", ExecOptions{Outlive: true, Timeout: time.Second, grace: time.Millisecond}, nil, agent.StrictNone, false, time.Second, time.Millisecond},
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
// sandbox whose agent binds its own socket there, under gVisor or made by an older sbx (0777).
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

// A static sbx runs as the agent in any image; one linked dynamically (a cgo build) only in
// the bundled images, which have its libc, and the reason says so; a binary the sandbox
// user cannot run gives no sandbox an agent.
func TestAgentBinaryProblem(t *testing.T) {
	dir := t.TempDir()
	static := filepath.Join(dir, "static")
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF\x02\x01\x01")
	hdr[16], hdr[18], hdr[20] = 2, 0x3e, 1
	hdr[52], hdr[54], hdr[58] = 64, 56, 64
	if err := os.WriteFile(static, hdr, 0o755); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "private")
	if err := os.WriteFile(private, hdr, 0o700); err != nil {
		t.Fatal(err)
	}
	dynamic, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	if dynamic, err = filepath.EvalSymlinks(dynamic); err != nil {
		t.Fatal(err)
	}
	if _, dyn := inspectAgentBinary(dynamic); !dyn {
		t.Fatalf("%s has no PT_INTERP: the test needs a dynamically linked binary", dynamic)
	}
	for _, tt := range []struct {
		bin, image, want string
	}{
		{static, "debian:bookworm-slim", ""},
		{static, images.SandboxTag, ""},
		{dynamic, images.SandboxTag, ""},
		{dynamic, "debian:bookworm-slim", "is linked dynamically (a cgo build), and image debian:bookworm-slim is not one sbx bundles"},
		{private, images.SandboxTag, "is not readable and executable by every user"},
		{filepath.Join(dir, "gone"), images.SandboxTag, "no such file"},
		{"", images.SandboxTag, "sbx does not know where its binary is"},
	} {
		m := &Manager{AgentBinary: tt.bin}
		got := m.agentBinaryProblem(tt.image)
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%s on %s: %q, want %q", tt.bin, tt.image, got, tt.want)
		}
	}

	// CommandPath, for explain, follows the same rule as the sandboxes sbx makes, and says why
	// a sandbox gets no agent.
	for _, tt := range []struct {
		m         *Manager
		cfg       config.Config
		path, why string
	}{
		{&Manager{Agents: true, State: &StateStore{}, AgentBinary: static}, config.Config{Image: "debian:bookworm-slim"}, PathAgent, ""},
		{&Manager{Agents: false, State: &StateStore{}, AgentBinary: static}, config.Config{Image: images.SandboxTag}, PathEngine, "the engine cannot see this machine's files"},
		{&Manager{Agents: true, State: &StateStore{}, AgentBinary: static}, config.Config{Image: images.SandboxTag, Isolation: config.IsolationGVisor}, PathAgent, ""},
		{&Manager{Agents: true, State: &StateStore{}, AgentBinary: dynamic}, config.Config{Image: "debian:bookworm-slim"}, PathEngine, "linked dynamically"},
		{&Manager{Agents: true, State: &StateStore{}, AgentBinary: dynamic}, config.Config{Image: images.SandboxTag}, PathAgent, ""},
	} {
		path, why := tt.m.CommandPath(nil, tt.cfg)
		if path != tt.path || tt.why == "" && why != "" || !strings.Contains(why, tt.why) {
			t.Errorf("%+v: %q %q, want %q %q", tt.cfg, path, why, tt.path, tt.why)
		}
		if dir := tt.m.agentDir("x", tt.cfg); (dir != "") != (tt.path == PathAgent) {
			t.Errorf("%+v: agent dir %q for path %q", tt.cfg, dir, tt.path)
		}
	}
}
