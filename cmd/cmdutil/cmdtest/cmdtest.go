// Package cmdtest holds what the command packages' tests share: a table of flag cases run
// through a NewCmdX constructor, and a Factory over a fake engine for the run functions. It
// imports testing, so only tests import it; cmdutil.TestFactory, which the binary may carry,
// stays free of it.
package cmdtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
)

// FlagCase is one row of a flag table: the arguments, and either the error they must give
// or a check of the options they must fill.
type FlagCase[O any] struct {
	Args []string
	// WantErr is a part of the error's text; "" expects success.
	WantErr string
	// Code, when not 0, is the exit code the error must map to.
	Code int
	// Check says whether the options are right; nil checks nothing beyond success.
	Check func(*O) bool
}

// Flags runs each case through newCmd, with a run function that records the options
// instead of running: a case expecting an error must fail before it is called.
func Flags[O any](t *testing.T, newCmd func(*cmdutil.Factory, func(context.Context, *O) error) *cobra.Command, cases []FlagCase[O]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(strings.Join(tt.Args, " "), func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
			var got *O
			cmd := newCmd(f, func(_ context.Context, o *O) error { got = o; return nil })
			cmd.SetArgs(tt.Args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			switch {
			case tt.WantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.WantErr)):
				t.Errorf("err = %v, want %q", err, tt.WantErr)
			case tt.WantErr != "" && got != nil:
				t.Errorf("ran with %+v despite %v", got, err)
			case tt.WantErr != "" && tt.Code != 0 && errs.ExitCode(err) != tt.Code:
				t.Errorf("%v: exit %d, want %d", err, errs.ExitCode(err), tt.Code)
			case tt.WantErr == "" && err != nil:
				t.Errorf("err = %v", err)
			case tt.WantErr == "" && tt.Check != nil && !tt.Check(got):
				t.Errorf("options %+v", got)
			}
		})
	}
}

// Env is a command's world for a run function's test: a Factory whose engine is Fake (or,
// when Fake is nil, one whose dialling fails the test), home and project directories of
// its own, its environment variables, and the buffers behind its streams.
type Env struct {
	F            *cmdutil.Factory
	IO           *iostreams.IOStreams
	In, Out, Err *bytes.Buffer
	Fake         *sandboxtest.FakeEngine
	Home         string
	Project      string
	// Vars are the variables F sees; a test may set them until the run function reads them.
	Vars map[string]string
}

// NewEnv returns an Env whose engine is fake, nil for none. Stubs may be added to fake
// until the run function dials it.
func NewEnv(t *testing.T, fake *sandboxtest.FakeEngine) *Env {
	t.Helper()
	ios, in, out, errOut := iostreams.Test()
	e := &Env{IO: ios, In: in, Out: out, Err: errOut, Fake: fake, Home: t.TempDir(), Project: t.TempDir(), Vars: map[string]string{}}
	var eng sandbox.Engine
	if fake != nil {
		fake.T = t
		eng = fake
	}
	e.F = cmdutil.TestFactory(ios, e.Vars, e.Home, e.Project, time.Now(), eng)
	if fake == nil {
		e.F.Engine = func(context.Context) (sandbox.Engine, error) {
			t.Error("the engine was dialled")
			return nil, errors.New("no engine")
		}
	}
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
