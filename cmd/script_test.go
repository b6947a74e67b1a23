package cmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"sbx": func() { os.Exit(Main()) },
	})
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
	})
}
