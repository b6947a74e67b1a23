package cmd

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sbx-sandbox/sbx/internal/clitest"
)

func TestMain(m *testing.M) {
	testscript.Main(cleanupAfter{m}, map[string]func(){
		"sbx": func() { os.Exit(Main()) },
	})
}

// cleanupAfter runs the tests, then removes the sbx binary the engine tests built.
type cleanupAfter struct{ m *testing.M }

func (c cleanupAfter) Run() int {
	code := c.m.Run()
	clitest.RemoveBinary()
	return code
}

// TestScripts runs testdata/script/*.txtar against the real entry point. HOME and the XDG
// directories live in $WORK so a developer's own config never leaks in, and DOCKER_HOST points
// at a socket that does not exist, so a script that dials the engine by mistake fails.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("..", "testdata", "script"),
		Setup: func(env *testscript.Env) error {
			home := filepath.Join(env.WorkDir, "home")
			env.Setenv("HOME", home)
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
			env.Setenv("XDG_STATE_HOME", filepath.Join(home, ".local", "state"))
			env.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
			env.Setenv("DOCKER_HOST", "unix:///nonexistent/no-engine.sock")
			env.Setenv("DOCKER_CONFIG", filepath.Join(home, ".docker"))
			env.Setenv("NO_COLOR", "1")
			return os.MkdirAll(home, 0o755)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"exitcode": exitcode},
	})
}

// exitcode runs a program and asserts its exact exit status: "exitcode 125 sbx exec -- true".
// "! exec" would accept any failure, so a wrong code would pass. Its output is kept for the
// stdout and stderr assertions that follow.
func exitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode CODE PROGRAM [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %q is not a number", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: running %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}
