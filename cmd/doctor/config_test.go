package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestConfigChecks(t *testing.T) {
	home, root := t.TempDir(), t.TempDir()
	userFile := filepath.Join(home, ".config", "sbx", "config.yaml")
	resolve := func() (*config.Resolved, error) {
		return config.Resolve(config.Inputs{
			Getenv:      func(string) string { return "" },
			HomeDir:     func() (string, error) { return home, nil },
			WorkingDir:  func() (string, error) { return root, nil },
			GitTopLevel: func(string) (string, bool) { return "", false },
		})
	}
	opts := &DoctorOptions{ResolveConfig: resolve}

	checks := configChecks(opts)
	if len(checks) != 2 || checks[0].Name != "user config" || checks[1].Name != "project config" {
		t.Fatalf("checks = %+v", checks)
	}
	for _, c := range checks {
		if c.Status != StatusOK || c.Required || !strings.Contains(c.Detail, "not found (optional)") {
			t.Errorf("missing file: %+v", c)
		}
	}

	if err := os.MkdirAll(filepath.Dir(userFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(userFile, []byte("memory: 2g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, config.ProjectFileName), []byte("memroy: 2g\nmemory: 8m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	checks = configChecks(opts)
	if c := checks[0]; c.Status != StatusOK || !strings.HasSuffix(c.Detail, "config.yaml valid") {
		t.Errorf("user: %+v", c)
	}
	c := checks[1]
	if c.Status != StatusFail || !c.Required || !strings.Contains(c.Detail, `.sbx.yaml:1: memroy: unknown key; did you mean "memory"?`) ||
		!strings.Contains(c.Detail, "and 1 more") || c.Fix != `rename it to "memory"` {
		t.Errorf("project: %+v", c)
	}
}

func TestConfigChecksUnresolvable(t *testing.T) {
	opts := &DoctorOptions{ResolveConfig: func() (*config.Resolved, error) {
		return nil, errs.Usagef("finding the project root: %w", errors.New("--project /x: no such file or directory")).WithHint("pass --project with an existing directory")
	}}
	checks := configChecks(opts)
	if len(checks) != 1 || checks[0].Status != StatusWarn || checks[0].Required || checks[0].Fix == "" {
		t.Errorf("checks = %+v", checks)
	}
	if configChecks(&DoctorOptions{}) != nil {
		t.Error("no resolver should mean no config checks")
	}
}
