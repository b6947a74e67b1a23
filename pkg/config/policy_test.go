package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestDecideTool(t *testing.T) {
	tests := []struct {
		name        string
		allow, deny []string
		tool        string
		allowed     bool
		rule, key   string
	}{
		{"default allows exec", []string{"exec", "read", "write"}, []string{"browser"}, "exec", true, "exec", "tools.allow[0]"},
		{"default denies browser", []string{"exec", "read", "write"}, []string{"browser"}, "browser", false, "browser", "tools.deny[0]"},
		{"deny wins over allow", []string{"*"}, []string{"write"}, "write", false, "write", "tools.deny[0]"},
		{"star allows everything", []string{"*"}, nil, "browser", true, "*", "tools.allow[0]"},
		{"glob deny", []string{"*"}, []string{"w*"}, "write", false, "w*", "tools.deny[0]"},
		{"glob allow", []string{"re?d"}, nil, "read", true, "re?d", "tools.allow[0]"},
		{"non-empty allow blocks the rest", []string{"exec"}, nil, "read", false, "", "tools.allow"},
		{"empty allow allows", nil, nil, "read", true, "", ""},
		{"empty allow, deny all", nil, []string{"*"}, "exec", false, "*", "tools.deny[0]"},
		{"second deny rule", []string{"*"}, []string{"exec", "b*"}, "browser", false, "b*", "tools.deny[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Resolved{Config: Config{Tools: Tools{Allow: tt.allow, Deny: tt.deny}}, Sources: map[string]Source{
				"tools.allow": {Layer: LayerDefault}, "tools.deny": {Layer: LayerProject, File: "/p/.sbx.yaml", Line: 3},
			}}
			d := r.DecideTool(tt.tool)
			if d.Allowed != tt.allowed || d.Rule != tt.rule || d.Key != tt.key {
				t.Errorf("decision = %+v, want allowed=%v rule=%q key=%q", d, tt.allowed, tt.rule, tt.key)
			}
			if err := CheckTool(r, tt.tool); (err == nil) != tt.allowed {
				t.Errorf("CheckTool = %v", err)
			}
		})
	}
}

func TestCheckToolError(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve()
	err := CheckTool(r, "browser")
	var perr *PolicyError
	if !errors.As(err, &perr) {
		t.Fatalf("err = %v", err)
	}
	if got, want := err.Error(), `tool "browser" is denied by "browser" in tools.deny (default)`; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if got := errs.Hint(err); !strings.Contains(got, `remove "browser" from tools.deny`) || !strings.Contains(got, "sbx explain --tool browser") {
		t.Errorf("hint = %q", got)
	}
	if errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("exit code = %d", errs.ExitCode(err))
	}

	f.projectFile("tools:\n  allow:\n    - exec\n")
	r = f.mustResolve()
	err = CheckTool(r, "write")
	if got, want := err.Error(), `tool "write" is not matched by tools.allow [exec] (project:`+f.root+`/.sbx.yaml:2)`; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if got := errs.Hint(err); !strings.Contains(got, `add "write" to tools.allow (e.g. tools: {allow: [exec, write]}`) {
		t.Errorf("hint = %q", got)
	}
	f.projectFile("tools:\n  deny: ['*']\n")
	if err := CheckTool(f.mustResolve(), "exec"); err == nil || !strings.Contains(err.Error(), `(project:`+f.root+`/.sbx.yaml:2)`) {
		t.Errorf("deny rule source missing: %v", err)
	}
}
