package sandbox_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// testResolver resolves configs as sbx's commands do, run in dir, with an empty home and
// environment.
func testResolver(t *testing.T, dir string) *sandbox.Resolver {
	home := t.TempDir()
	return &sandbox.Resolver{Version: "test", Inputs: config.Inputs{
		Getenv:     func(string) string { return "" },
		HomeDir:    func() (string, error) { return home, nil },
		WorkingDir: func() (string, error) { return dir, nil },
	}}
}

// project is a project directory with a .sbx.yaml, and the resolver of a command run in it.
type project struct {
	t   *testing.T
	dir string
	rv  *sandbox.Resolver
}

func newProject(t *testing.T, file string) *project {
	p := &project{t: t, dir: t.TempDir()}
	p.rv = testResolver(t, p.dir)
	p.write(file)
	return p
}

// write replaces the project file, and the resolver with one of a new command: a resolver
// reads each project once.
func (p *project) write(file string) {
	p.t.Helper()
	if err := os.WriteFile(filepath.Join(p.dir, config.ProjectFileName), []byte(file), 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.rv = testResolver(p.t, p.dir)
}

// resolve is the input a command run in the project resolves for sandbox name with flags.
func (p *project) resolve(name string, flags ...config.Setting) sandbox.SpecInput {
	p.t.Helper()
	inputs := p.rv.Inputs
	inputs.Name, inputs.Flags = name, flags
	r, err := config.Resolve(inputs)
	if err != nil {
		p.t.Fatal(err)
	}
	in, err := p.rv.SpecInput(r)
	if err != nil {
		p.t.Fatal(err)
	}
	in.CreateSettings = flags
	return in
}

// sandboxOf is the sandbox a create from in makes, as the engine reports it.
func sandboxOf(t *testing.T, in sandbox.SpecInput) *sandbox.Sandbox {
	t.Helper()
	spec, err := sandbox.BuildSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	return &sandbox.Sandbox{Name: in.Name, ID: "c1", Status: "running", Labels: spec.Container.Labels}
}

func flag(key, value string) config.Setting {
	return config.Setting{Key: key, Values: []string{value}, Source: config.Source{Layer: config.LayerFlag, Name: "--" + key}}
}

func TestDriftCurrent(t *testing.T) {
	p := newProject(t, "memory: 512m\n")
	asked := p.resolve("web")
	sb := sandboxOf(t, asked)
	for what, a := range map[string]*sandbox.SpecInput{"ls": nil, "exec": &asked} {
		d, err := p.rv.Drift(sb, a)
		if err != nil || !d.Current || len(d.Keys) != 0 {
			t.Errorf("%s: %+v %v, want current", what, d, err)
		}
	}
}

// A change in the project file is named by its keys, sorted, whether the command resolved a
// config of its own (exec, explain) or not (ls).
func TestDriftNamesTheChangedKeys(t *testing.T) {
	p := newProject(t, "memory: 512m\npidsLimit: 128\n")
	sb := sandboxOf(t, p.resolve("web"))
	p.write("memory: 768m\npidsLimit: 128\nenv:\n  CHANGED: \"1\"\n")
	asked := p.resolve("web")
	for what, a := range map[string]*sandbox.SpecInput{"ls": nil, "exec": &asked} {
		d, err := p.rv.Drift(sb, a)
		if err != nil || d.Current || !slices.Equal(d.Keys, []string{"env", "memory", "memorySwap"}) {
			t.Errorf("%s: %+v %v, want env, memory and memorySwap changed", what, d, err)
		}
		if d != nil && d.Want.Config.Memory != 768<<20 {
			t.Errorf("%s: want the new memory to recreate with, got %d", what, d.Want.Config.Memory)
		}
	}
}

// Flags given at create are measured against, not counted as a change, and kept in what the
// sandbox is recreated from.
func TestDriftMeasuresAgainstTheCreateFlags(t *testing.T) {
	p := newProject(t, "")
	sb := sandboxOf(t, p.resolve("web", flag("memory", "600m"), flag("env", "FROM_FLAG=1")))
	asked := p.resolve("web") // exec has no config flags
	if d, err := p.rv.Drift(sb, &asked); err != nil || !d.Current {
		t.Errorf("unchanged files: %+v %v, want current", d, err)
	}
	p.write("pidsLimit: 128\n")
	asked = p.resolve("web")
	for what, a := range map[string]*sandbox.SpecInput{"ls": nil, "exec": &asked} {
		d, err := p.rv.Drift(sb, a)
		if err != nil || !slices.Equal(d.Keys, []string{"pidsLimit"}) {
			t.Fatalf("%s: %+v %v, want pidsLimit alone", what, d, err)
		}
		if d.Want.Config.Memory != 600<<20 || d.Want.Config.Env["FROM_FLAG"] != "1" || len(d.Want.CreateSettings) != 2 {
			t.Errorf("%s: recreating would drop the create flags: %+v", what, d.Want)
		}
	}
}

// sbx create's flags are what it asks for now: one that differs from the flag the sandbox was
// created with is a change, while the flags it does not give keep their old settings.
func TestDriftCountsCreateFlagsGivenNow(t *testing.T) {
	p := newProject(t, "")
	sb := sandboxOf(t, p.resolve("web", flag("memory", "600m"), flag("env", "FROM_FLAG=1")))
	asked := p.resolve("web", flag("memory", "2g"))
	d, err := p.rv.Drift(sb, &asked)
	if err != nil || d.Current || !slices.Equal(d.Keys, []string{"memory", "memorySwap"}) {
		t.Fatalf("%+v %v, want memory and memorySwap changed", d, err)
	}
	if d.Want.Config.Memory != 2<<30 || d.Want.Config.Env["FROM_FLAG"] != "1" {
		t.Errorf("recreating would not apply the new flag or would drop the old one: %+v", d.Want.Config)
	}
	asked = p.resolve("web", flag("memory", "600m"))
	if d, err := p.rv.Drift(sb, &asked); err != nil || !d.Current {
		t.Errorf("the same flag again: %+v %v, want current", d, err)
	}
}

// A sandbox belongs to the project its label names: a command run elsewhere resolves that
// project, not its own directory.
func TestDriftResolvesTheSandboxesOwnProject(t *testing.T) {
	p := newProject(t, "memory: 512m\n")
	sb := sandboxOf(t, p.resolve("web"))
	elsewhere := newProject(t, "memory: 256m\n")
	asked := elsewhere.resolve("web")
	for what, a := range map[string]*sandbox.SpecInput{"ls": nil, "exec": &asked} {
		if d, err := elsewhere.rv.Drift(sb, a); err != nil || !d.Current {
			t.Errorf("%s: %+v %v, want current", what, d, err)
		}
	}
}

// The ports a sandbox publishes (sbx browser's) are part of its config, not a change.
func TestDriftKeepsThePorts(t *testing.T) {
	p := newProject(t, "")
	in := p.resolve("web", flag("network", "bridge"))
	in.Ports = []string{"9222/tcp"}
	sb := sandboxOf(t, in)
	asked := p.resolve("web")
	d, err := p.rv.Drift(sb, &asked)
	if err != nil || !d.Current || !slices.Equal(d.Want.Ports, []string{"9222/tcp"}) {
		t.Errorf("%+v %v, want current with its port", d, err)
	}
}

// A sandbox that is what the command asks for is current without its project being read;
// otherwise a project that is gone makes the answer unknown.
func TestDriftWhenTheProjectIsGone(t *testing.T) {
	p := newProject(t, "")
	asked := p.resolve("web")
	sb := sandboxOf(t, asked)
	if err := os.RemoveAll(p.dir); err != nil {
		t.Fatal(err)
	}
	if d, err := p.rv.Drift(sb, &asked); err != nil || !d.Current {
		t.Errorf("asked for what it is: %+v %v, want current", d, err)
	}
	if d, err := p.rv.Drift(sb, nil); err == nil {
		t.Errorf("ls of a sandbox whose project is gone: %+v, want an error", d)
	}
}

// Sandboxes of one project made alike are resolved once, each under its own name.
func TestResolveSharesAResolutionAcrossNames(t *testing.T) {
	p := newProject(t, "memory: 512m\n")
	a, b := sandboxOf(t, p.resolve("a")), sandboxOf(t, p.resolve("b"))
	rv := p.rv
	first, err := rv.Resolve(a)
	if err != nil {
		t.Fatal(err)
	}
	p.write("memory: 768m\n") // unread: the resolution of a is reused
	second, err := rv.Resolve(b)
	if err != nil || second.Name != "b" || second.Config.Memory != first.Config.Memory {
		t.Errorf("%s: memory %d %v, want b with a's %d", second.Name, second.Config.Memory, err, first.Config.Memory)
	}
}

// A seccomp profile may lie where a sandbox can write; sbx never reads it without a bound.
func TestSpecInputBoundsTheSeccompProfile(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, make([]byte, 1<<20+1), 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{huge: "larger than 1m", zero: "not a regular file"} {
		r := &config.Resolved{Name: "x", ProjectRoot: dir, Config: config.Defaults()}
		r.Config.SeccompProfile = p
		if _, err := testResolver(t, dir).SpecInput(r); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", p, err, want)
		}
	}
}
