package cmdutil

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/buildinfo"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/explain"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// TestLabelEnv names the variable whose value, when set, is put on every sandbox as label
// sbx.test=VALUE, so a test run can find and remove what it made.
const TestLabelEnv = "SBX_TEST_LABEL"

// StateDir is where sbx keeps last-use times: $XDG_STATE_HOME/sbx, else ~/.local/state/sbx.
func StateDir(f *Factory) string {
	if d := f.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sbx")
	}
	home, _ := f.HomeDir()
	return filepath.Join(home, ".local", "state", "sbx")
}

// Manager dials the engine and returns a sandbox manager that reports progress on stderr and
// builds missing bundled images on first use.
func Manager(ctx context.Context, f *Factory) (*sandbox.Manager, error) {
	eng, err := f.Engine(ctx)
	if err != nil {
		return nil, err
	}
	home, _ := f.HomeDir()
	m := &sandbox.Manager{
		Engine:  eng,
		State:   &sandbox.StateStore{Dir: StateDir(f), Now: f.Now},
		Now:     f.Now,
		Agents:  sandbox.AgentsSupported(eng.DaemonHost()),
		Warn:    f.IOStreams.ErrOut,
		HomeDir: home,
	}
	progress := &BuildProgress{Out: f.IOStreams.ErrOut, TTY: f.IOStreams.IsStderrTTY(), Quiet: f.IOStreams.Quiet(), Now: f.Now}
	if !f.IOStreams.Quiet() {
		m.Progress = f.IOStreams.ErrOut
	}
	if f.Global.Debug {
		m.Debug = f.IOStreams.ErrOut
	}
	m.BuildImage = func(ctx context.Context, image string) error {
		_, err := (&imagebuild.Images{Engine: eng, Now: f.Now}).Ensure(ctx, image, progress.Show)
		return err
	}
	return m, nil
}

// SpecInput turns a resolved config into the sandbox spec input, reading the seccomp profile
// file when one is configured.
func SpecInput(f *Factory, r *config.Resolved) (sandbox.SpecInput, error) {
	in := sandbox.SpecInput{Name: r.Name, ProjectRoot: r.ProjectRoot, Config: r.Config, Version: buildinfo.Get().Version}
	if p := r.Config.SeccompProfile; p != "" {
		data, err := config.ReadFileLimit(p, maxSeccompProfile)
		if err != nil {
			return in, errs.Failure(fmt.Errorf("reading seccompProfile %s (from %s): %w", p, r.Source("seccompProfile"), err), "fix the path, or remove the key to use the engine's default profile")
		}
		in.SeccompJSON = data
	}
	if v := f.Getenv(TestLabelEnv); v != "" {
		in.ExtraLabels = map[string]string{"sbx.test": v}
	}
	return in, nil
}

// maxSeccompProfile bounds a seccomp profile: moby's default is about 20 KiB, and the file may
// lie in a project a sandbox can write to.
const maxSeccompProfile = 1 << 20

// ReportFailures ends a command that acted on several sandboxes: every failure but the last
// is printed here, the last is returned for Main to print with its hint. The exit code is 125
// when any failure was sbx's or the engine's, else 1 (a missing name, say).
func ReportFailures(io *iostreams.IOStreams, failed []error) error {
	if len(failed) == 0 {
		return nil
	}
	code := errs.CodeError
	for _, err := range failed {
		if errs.ExitCode(err) == errs.CodeFailure {
			code = errs.CodeFailure
		}
	}
	for _, err := range failed[:len(failed)-1] {
		fmt.Fprintf(io.ErrOut, "error: %s\n", SafeLines(err.Error()))
	}
	last := failed[len(failed)-1]
	return errs.New(last, code, errs.Hint(last))
}

// SandboxNames checks the names given as arguments, or returns the project's default sandbox
// when there are none. A config that fails validation still names the default sandbox, so
// stop and rm work on it.
func SandboxNames(f *Factory, args []string) ([]string, error) {
	if len(args) == 0 {
		r, err := ResolveConfig(f, "")
		if r == nil {
			return nil, err
		}
		return []string{r.Name}, nil
	}
	for _, a := range args {
		if err := config.ValidName(a); err != nil {
			return nil, errs.Usagef("%v", err)
		}
	}
	return args, nil
}

// Reresolver resolves an existing sandbox's config from its project with the flag settings
// and published ports it was created with, so commands without those flags see no drift.
func Reresolver(f *Factory) func(*sandbox.Sandbox) (sandbox.SpecInput, error) {
	return func(sb *sandbox.Sandbox) (sandbox.SpecInput, error) {
		in, _, err := reresolve(f, sb)
		return in, err
	}
}

// reresolve resolves sb's config again with its creation settings and ports, and says whether
// the result depends on its name.
func reresolve(f *Factory, sb *sandbox.Sandbox) (sandbox.SpecInput, bool, error) {
	settings, err := sb.CreateSettings()
	if err != nil {
		return sandbox.SpecInput{}, false, err
	}
	in := ConfigInputs(f, sb.Name, settings...)
	in.ProjectDir = sb.Labels[sandbox.LabelProject]
	r, err := config.Resolve(in)
	if err != nil {
		return sandbox.SpecInput{}, false, err
	}
	spec, err := SpecInput(f, r)
	if err != nil {
		return sandbox.SpecInput{}, false, err
	}
	spec.Ports, spec.CreateSettings = sb.PublishedPorts(), settings
	return spec, r.DependsOnName(), nil
}

// SandboxConfig resolves sb's configuration as it stands now: its project's files with the
// flag settings it was created with.
func SandboxConfig(f *Factory, sb *sandbox.Sandbox) (config.Config, error) {
	in, _, err := reresolve(f, sb)
	return in.Config, err
}

// ConfigState compares the config sb was created with against what its project resolves to
// now, with its creation settings: "ok", "changed" with the differing keys, or "unknown" when
// it cannot be resolved.
func ConfigState(f *Factory, sb *sandbox.Sandbox) (string, []string) {
	return NewConfigStates(f).Of(sb)
}

// ConfigStates is ConfigState for many sandboxes (sbx ls). Sandboxes of one project created
// with the same flags and the same shape resolve alike unless a config file has sandbox
// sections, so such a group is resolved once. It is safe for concurrent use.
type ConfigStates struct {
	f    *Factory
	mu   sync.Mutex
	memo map[string]resolvedShape
}

type resolvedShape struct{ shape, hash string }

// NewConfigStates returns an empty ConfigStates.
func NewConfigStates(f *Factory) *ConfigStates {
	return &ConfigStates{f: f, memo: map[string]resolvedShape{}}
}

// Of is ConfigState of sb.
func (c *ConfigStates) Of(sb *sandbox.Sandbox) (string, []string) {
	// The config label holds the ports, and equal labels are what most sandboxes share.
	key := sb.Labels[sandbox.LabelProject] + "\x00" + sb.Labels[sandbox.LabelCreateSettings] + "\x00" + sb.Labels[sandbox.LabelConfig]
	c.mu.Lock()
	rs, ok := c.memo[key]
	c.mu.Unlock()
	if !ok {
		in, dependsOnName, err := reresolve(c.f, sb)
		if err != nil {
			return "unknown", nil
		}
		shape, hash, err := in.Shape()
		if err != nil {
			return "unknown", nil
		}
		rs = resolvedShape{shape, hash}
		if !dependsOnName {
			c.mu.Lock()
			c.memo[key] = rs
			c.mu.Unlock()
		}
	}
	if rs.hash == sb.Hash() {
		return "ok", nil
	}
	return "changed", sandbox.ShapeDiff(sb.Labels[sandbox.LabelConfig], rs.shape)
}

// LiveState asks the engine what explain shows about a sandbox: whether it exists and runs,
// and whether its stored config hash matches r. An unreachable engine is reported, not fatal.
func LiveState(ctx context.Context, f *Factory, r *config.Resolved) (*explain.Live, error) {
	eng, err := f.Engine(ctx)
	if err != nil {
		return &explain.Live{Error: err.Error()}, nil
	}
	m := &sandbox.Manager{Engine: eng, Now: f.Now}
	live := &explain.Live{Reachable: true}
	create := "sbx create"
	if !r.IsDefaultName {
		create += " -n " + r.Name
	}
	sb, err := m.Inspect(ctx, r.Name)
	if sandbox.IsNotFound(err) {
		live.ApplyCommand = create
		return live, nil
	}
	if err != nil {
		return nil, err
	}
	live.Exists, live.Status, live.Running = true, sb.Status, sb.Status == "running"
	in, err := SpecInput(f, r)
	if err != nil {
		return nil, err
	}
	shape, hash, err := in.Shape()
	if err != nil {
		return nil, err
	}
	if hash != sb.Hash() {
		// Without flags of its own, explain compares as exec would: with the creation settings.
		if again, err := Reresolver(f)(sb); err == nil {
			if againShape, againHash, err := again.Shape(); err == nil && againHash == sb.Hash() {
				shape, hash = againShape, againHash
			}
		}
	}
	live.HashMatches = hash == sb.Hash()
	if !live.HashMatches {
		live.DifferingKeys = sandbox.ShapeDiff(sb.Labels[sandbox.LabelConfig], shape)
		live.ApplyCommand = create + " --replace"
	}
	return live, nil
}
