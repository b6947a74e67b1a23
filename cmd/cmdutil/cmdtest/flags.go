// Package cmdtest holds what the command packages' tests share: a table of flag cases run
// through a NewCmdX constructor (flags.go), and a Factory over a fake engine for the run
// functions (env.go). It imports testing, so only tests import it; cmdutil.TestFactory,
// which the binary may carry, stays free of it.
package cmdtest

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
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
