package explain

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/explain"
)

func TestNewCmdExplainFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Global: &cmdutil.GlobalOptions{}}
	var got *ExplainOptions
	cmd := NewCmdExplain(f, func(_ context.Context, o *ExplainOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"web", "--tool", "browser", "--json", "--check", "--memory", "2g", "--env", "A=1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Name != "web" || got.Tool != "browser" || !got.JSON || !got.Check {
		t.Errorf("options = %+v", got)
	}
	layer := got.Config.Layer()
	if len(layer) != 2 || layer[0].Key != "memory" || layer[1].Key != "env" || layer[0].Source.String() != "flag:--memory" {
		t.Errorf("flag layer = %+v", layer)
	}
	if got.Live == nil {
		t.Error("explain has no engine query wired")
	}

	cmd = NewCmdExplain(f, func(context.Context, *ExplainOptions) error { return nil })
	cmd.SetArgs([]string{"--tool", "rm"})
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	if err := cmd.Execute(); errs.ExitCode(err) != errs.CodeUsage || !strings.Contains(errs.Hint(err), "exec, read, write, browser") {
		t.Errorf("unknown tool: %v (hint %q)", err, errs.Hint(err))
	}
}

// resolver returns an ExplainOptions.Resolve over a temp project holding projectFile.
func resolver(t *testing.T, projectFile string) func(string, []config.Setting) (*config.Resolved, error) {
	home, root := t.TempDir(), t.TempDir()
	if projectFile != "" {
		if err := os.WriteFile(filepath.Join(root, config.ProjectFileName), []byte(projectFile), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return func(name string, flags []config.Setting) (*config.Resolved, error) {
		return config.Resolve(config.Inputs{
			Getenv:      func(string) string { return "" },
			HomeDir:     func() (string, error) { return home, nil },
			WorkingDir:  func() (string, error) { return root, nil },
			Name:        name,
			Flags:       flags,
			GitTopLevel: func(string) (string, bool) { return "", false },
		})
	}
}

func TestExplainRun(t *testing.T) {
	liveCalls := 0
	live := func(context.Context, *config.Resolved) (*explain.Live, error) {
		liveCalls++
		return nil, errors.New("cannot reach the Docker engine at unix:///x.sock")
	}
	tests := []struct {
		name    string
		file    string
		opts    ExplainOptions
		tty     bool
		code    int
		want    []string
		notWant []string
		calls   int
	}{
		{name: "plain", opts: ExplainOptions{Live: live}, calls: 1,
			want: []string{"Sandbox\n", "  mode ", "ok        read-only root", "not reachable: cannot reach the Docker engine"}},
		{name: "tty without colour", tty: true, opts: ExplainOptions{}, want: []string{"╭", "✓", "not checked"}, notWant: []string{"\x1b["}},
		{name: "tool decision", opts: ExplainOptions{Tool: "browser"}, want: []string{"Decision for --tool browser", `fix: remove "browser" from tools.deny`}},
		{name: "named sandbox", opts: ExplainOptions{Name: "web"}, want: []string{"container     sbx-web"}},
		{name: "refused config still renders, exit 0", file: "memory: 1m\n", opts: ExplainOptions{},
			want: []string{"Problems\n  error    project:", `memory "1m": below the minimum`}},
		{name: "check valid", opts: ExplainOptions{Check: true, Live: live}, want: []string{"is valid"}, notWant: []string{"Settings"}},
		{name: "check refused", file: "memory: 8m\n", opts: ExplainOptions{Check: true, Live: live}, code: 1,
			want: []string{`memory "8m"`, "is refused: 1 problem"}},
		{name: "check json refused", file: "memory: 8m\n", opts: ExplainOptions{Check: true, JSON: true}, code: 1,
			want: []string{`"valid": false`, `"key": "memory"`}},
		{name: "check untrusted", file: "network: bridge\n", opts: ExplainOptions{Check: true}, code: 1,
			want: []string{`network "bridge": loosens the sandbox`, "not trusted", "is refused: 1 problem"}},
		{name: "json", opts: ExplainOptions{JSON: true, Live: live}, calls: 1,
			want: []string{`"checked": true`, `"reachable": false`, `"error": "cannot reach the Docker engine at unix:///x.sock"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			liveCalls = 0
			ios, _, out, _ := iostreams.Test()
			ios.SetTTY(tt.tty)
			opts := tt.opts
			opts.IO = ios
			opts.Resolve = resolver(t, tt.file)
			err := explainRun(context.Background(), &opts)
			if code := errs.ExitCode(err); code != tt.code {
				t.Errorf("exit code %d (%v), want %d", code, err, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			if liveCalls != tt.calls {
				t.Errorf("engine asked %d times, want %d", liveCalls, tt.calls)
			}
		})
	}
}

func TestExplainRunResolveError(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	want := errs.Usagef("invalid sandbox name")
	err := explainRun(context.Background(), &ExplainOptions{IO: ios, Resolve: func(string, []config.Setting) (*config.Resolved, error) { return nil, want }})
	if !errors.Is(err, want) {
		t.Errorf("err = %v", err)
	}
}
