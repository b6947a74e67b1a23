package cmdtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Env is a command's world for a run function's test: a Factory whose engine is Fake (or,
// when Fake is nil, one whose dialling fails the test), home and project directories of
// its own, its environment variables, and the buffers behind its streams.
type Env struct {
	F            *cmdutil.Factory
	IO           *iostreams.IOStreams
	In, Out, Err *bytes.Buffer
	Fake         *enginetest.FakeEngine
	Home         string
	Project      string
	// Vars are the variables F sees; a test may set them until the run function reads them.
	Vars map[string]string
}

// NewEnv returns an Env whose engine is fake, nil for none. Stubs may be added to fake
// until the run function dials it.
func NewEnv(t *testing.T, fake *enginetest.FakeEngine) *Env {
	t.Helper()
	ios, in, out, errOut := iostreams.Test()
	e := &Env{IO: ios, In: in, Out: out, Err: errOut, Fake: fake, Home: t.TempDir(), Project: t.TempDir(), Vars: map[string]string{}}
	var eng engine.Engine
	if fake != nil {
		fake.T = t
		eng = fake.Docker()
	}
	e.F = cmdutil.TestFactory(ios, e.Vars, e.Home, e.Project, time.Now(), eng)
	if fake == nil {
		e.F.Engine = func(context.Context) (engine.Engine, error) {
			t.Error("the engine was dialled")
			return nil, errors.New("no engine")
		}
	}
	return e
}

// WithRunning returns an Env whose fake engine has sandbox name running, made from the
// configuration its project resolves to now; stubs for what the test needs next are added
// to its Fake.
func WithRunning(t *testing.T, name string) *Env {
	t.Helper()
	e := NewEnv(t, &enginetest.FakeEngine{})
	e.Fake.ContainerInspectFn = Inspect(e.Sandbox(t, name, container.StateRunning, nil))
	return e
}

// WriteProject writes the project's .sbx.yaml; trusted, it is recorded as the user's choice,
// as "sbx trust --yes" does.
func (e *Env) WriteProject(t *testing.T, content string, trusted bool) {
	t.Helper()
	p := filepath.Join(e.Project, config.ProjectFileName)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if trusted {
		if err := cmdutil.TrustFile(e.F, p); err != nil {
			t.Fatal(err)
		}
	}
}

// Sandbox is the engine's inspect answer for sandbox name, made from its configuration as
// e's project resolves it now, in state status: current, so no command sees it drift.
// change, when not nil, alters that configuration first, as an edit of the project since.
func (e *Env) Sandbox(t *testing.T, name string, status container.ContainerState, change func(*config.Config)) container.InspectResponse {
	t.Helper()
	r, err := cmdutil.ResolveConfig(e.F, name)
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmdutil.Resolver(e.F).SpecInput(r)
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(&in.Config)
	}
	in.CreatedAt = e.F.Now().Add(-time.Hour)
	spec, err := sandbox.BuildSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: "id-" + r.Name, State: &container.State{Status: status, Running: status == container.StateRunning}},
		Config:            spec.Container,
	}
}

// Summary is the engine's list entry of box, a sandbox as Sandbox makes it.
func Summary(box container.InspectResponse) container.Summary {
	return container.Summary{ID: box.ID, Names: []string{"/" + sandbox.ContainerName(box.Config.Labels[sandbox.LabelName])}, Image: box.Config.Image,
		State: box.State.Status, Labels: box.Config.Labels}
}

// DefaultName is the name of the project's own sandbox.
func (e *Env) DefaultName(t *testing.T) string {
	t.Helper()
	r, err := cmdutil.ResolveConfig(e.F, "")
	if err != nil {
		t.Fatal(err)
	}
	return r.Name
}

// Inspect serves the engine's inspect of the sandboxes given, by container name or ID, and
// the engine's not-found error for any other container.
func Inspect(boxes ...container.InspectResponse) func(context.Context, string) (container.InspectResponse, error) {
	return func(_ context.Context, id string) (container.InspectResponse, error) {
		for _, b := range boxes {
			if id == b.ID || id == sandbox.ContainerName(b.Config.Labels[sandbox.LabelName]) {
				return b, nil
			}
		}
		return container.InspectResponse{}, cerrdefs.ErrNotFound.WithMessage("No such container: " + id)
	}
}

// AnswerInTurn makes the fake's execs answer in turn, the first exec with the first answer,
// whatever the script; an exec past the last fails the test.
func (e *Env) AnswerInTurn(t *testing.T, answers ...enginetest.Answer) {
	var mu sync.Mutex
	e.Fake.AnswerExecs(func(cmd []string) enginetest.Answer {
		mu.Lock()
		defer mu.Unlock()
		if len(answers) == 0 {
			t.Errorf("an exec past the last answer: %.200q", cmd)
			return enginetest.Answer{Code: 1}
		}
		a := answers[0]
		answers = answers[1:]
		return a
	})
}

// ProcList answers the listing of a sandbox's background processes (proc.ParseList
// reads it) with one process, id, started by "sleep 60": running, or exited with code when
// code >= 0.
func ProcList(id string, code int) enginetest.Answer {
	exit, ended, alive := "", "", "1"
	if code >= 0 {
		exit, ended, alive = strconv.Itoa(code), "1700000002.000000", "0"
	}
	line := strings.Join([]string{id, "7", "1700000000.000000", exit, ended, "0", alive, "0", "0", "262144", `{"command":["sleep","60"]}`}, "\t")
	return enginetest.Answer{Stdout: strings.NewReader(line + "\n")}
}
