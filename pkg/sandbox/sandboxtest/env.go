// Package sandboxtest gives the integration tests of pkg/sandbox and of the capabilities
// built on it (pkg/procs, pkg/snippet, ...) one sandbox each on the real engine: its own
// name, project directory and state directory, the run's label, and its removal when the
// test ends, whatever happened.
package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Main runs a test binary's tests and removes the sbx binary Binary built for them.
func Main(m *testing.M) {
	code := m.Run()
	clitest.RemoveBinary()
	os.Exit(code)
}

// Run labels what this test process creates (enginetest.TestLabel), so a sweep finds it.
var Run = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "lc-" + hex.EncodeToString(b)
}()

var unsafeNameChars = regexp.MustCompile(`[^a-z0-9.-]+`)

// Env is one test's sandbox: the manager that runs it, the input it is made from, and the
// project directory bound as its workspace, which holds hello.txt.
type Env struct {
	T   *testing.T
	M   *sandbox.Manager
	In  sandbox.SpecInput
	Dir string
}

// Isolations are the kernel boundaries every lifecycle test runs on: the same test, the same
// assertions, unless a test says why an answer differs under gVisor.
var Isolations = []string{config.IsolationContainer, config.IsolationGVisor}

// OnEach runs f once for each isolation level, as a subtest named after it.
func OnEach(t *testing.T, f func(t *testing.T, iso string)) {
	for _, iso := range Isolations {
		t.Run(iso, func(t *testing.T) { f(t, iso) })
	}
}

// Isolated is a mutate that sets the isolation level, then applies more.
func Isolated(iso string, more func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		c.Isolation = iso
		if more != nil {
			more(c)
		}
	}
}

// ViaBoth runs f on each isolation level with sandboxes that have the agent and with
// sandboxes reached through the engine's exec API (custom images, remote engines).
func ViaBoth(t *testing.T, f func(t *testing.T, iso string, agents bool)) {
	OnEach(t, func(t *testing.T, iso string) {
		for _, agents := range []bool{true, false} {
			name := "agent"
			if !agents {
				name = "engine-exec"
			}
			t.Run(name, func(t *testing.T) { f(t, iso, agents) })
		}
	})
}

// New is the sandbox of a test, with the agent, from the defaults that mutate changes.
func New(t *testing.T, mutate func(*config.Config)) *Env {
	t.Helper()
	return NewVia(t, true, mutate)
}

// NewVia is New with the agent on or off. It checks from inside which way commands arrive:
// a child of the agent has a parent, an engine exec's main process has none (ppid 0).
func NewVia(t *testing.T, agents bool, mutate func(*config.Config)) *Env {
	t.Helper()
	e := NewAgents(t, agents, mutate)
	e.CheckTransport(agents)
	return e
}

// CheckTransport fails the test unless commands reach the sandbox the way agents says.
func (e *Env) CheckTransport(agents bool) {
	e.T.Helper()
	ppid := strings.TrimSpace(e.Sh("echo $PPID").Stdout)
	if (ppid != "0") != agents {
		e.T.Fatalf("agents=%v, but the command's parent pid is %q", agents, ppid)
	}
}

// NewAgents is NewVia without the check, for tests that look at the start itself.
func NewAgents(t *testing.T, agents bool, mutate func(*config.Config)) *Env {
	t.Helper()
	eng := enginetest.RealEngine(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	cfg.Image = images.SandboxTag
	if mutate != nil {
		mutate(&cfg)
	}
	name := strings.Trim(unsafeNameChars.ReplaceAllString(strings.ToLower(Run+"-"+t.Name()), "-"), "-")
	if len(name) > 60 {
		name = name[:60]
	}
	bin := ""
	if agents {
		bin = clitest.Binary(t)
	}
	e := &Env{T: t, Dir: dir,
		M: &sandbox.Manager{Engine: eng, State: &sandbox.StateStore{Dir: t.TempDir(), Now: time.Now}, Now: time.Now, Agents: agents, AgentBinary: bin,
			BuildImage: func(ctx context.Context, image string) error {
				_, err := (&imagebuild.Images{Engine: eng}).Ensure(ctx, image, nil)
				return err
			}},
		In: sandbox.SpecInput{Name: name, ProjectRoot: dir, Config: cfg, Version: "test", ExtraLabels: map[string]string{enginetest.TestLabel: Run}},
	}
	t.Cleanup(func() {
		if err := e.M.Remove(context.Background(), name, true); err != nil && !sandbox.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
	})
	return e
}

// Ensure makes the sandbox exist and run, as a command does before it runs.
func (e *Env) Ensure() *sandbox.EnsureResult {
	e.T.Helper()
	res, err := e.M.Ensure(context.Background(), e.In, sandbox.EnsureOptions{})
	if err != nil {
		e.T.Fatalf("Ensure: %v", err)
	}
	return res
}

// ExecOut is how a command ended and what it printed.
type ExecOut struct {
	Res            *sandbox.ExecResult
	Stdout, Stderr string
}

// Exec runs opts in the sandbox, which it ensures first; an error fails the test.
func (e *Env) Exec(ctx context.Context, opts sandbox.ExecOptions) ExecOut {
	e.T.Helper()
	res := e.Ensure()
	var out, errb bytes.Buffer
	opts.Stdout, opts.Stderr = &out, &errb
	r, err := e.M.Exec(ctx, res.Sandbox, opts)
	if err != nil {
		e.T.Fatalf("Exec %v: %v", opts.Cmd, err)
	}
	return ExecOut{r, out.String(), errb.String()}
}

// Sh runs a bash script in the sandbox.
func (e *Env) Sh(script string) ExecOut {
	e.T.Helper()
	return e.Exec(context.Background(), sandbox.ExecOptions{Cmd: []string{"bash", "-c", script}})
}

// Leftovers lists the sleep processes running in the sandbox, one command line each.
func (e *Env) Leftovers() string {
	e.T.Helper()
	out := e.Sh(`for p in /proc/[0-9]*; do c=$(tr '\0' ' ' <$p/cmdline 2>/dev/null) && echo "$c"; done`).Stdout
	var sleeps []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "sleep ") && line != "sleep infinity " {
			sleeps = append(sleeps, line)
		}
	}
	return strings.Join(sleeps, "\n")
}

// Output is a writer that runs f once what was written holds want, and keeps it all.
type Output struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	f    func()
}

// OnOutput is an Output that runs f, in a goroutine of its own, once want was written.
func OnOutput(want string, f func()) *Output { return &Output{want: want, f: f} }

func (w *Output) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.f != nil && strings.Contains(w.buf.String(), w.want) {
		go w.f()
		w.f = nil
	}
	return len(p), nil
}

// String is what was written so far.
func (w *Output) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
