package sandbox

import (
	"fmt"
	"sync"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Resolver resolves sandbox configurations from their projects as the commands do: it turns
// a resolved config into the input of BuildSpec, and resolves an existing sandbox's config
// again to tell whether it is current (Drift). It reads a project's files once, so make one
// per command. It is safe for concurrent use.
type Resolver struct {
	// Inputs are what every resolution shares: environment, home, working directory,
	// --config file, host size and trust store. Name, ProjectDir and Flags are set per sandbox.
	Inputs config.Inputs
	// Version is sbx's own, recorded on every sandbox.
	Version string
	// ExtraLabels are put on every sandbox (sbx.test, for a test run to find its own).
	ExtraLabels map[string]string

	mu sync.Mutex
	// memo holds resolutions that do not depend on the sandbox's name, by project, creation
	// settings and config label: most sandboxes sbx ls shows share them.
	memo map[string]SpecInput
}

// maxSeccompProfile bounds a seccomp profile: moby's default is about 20 KiB, and the file may
// lie in a project a sandbox can write to.
const maxSeccompProfile = 1 << 20

// SpecInput turns a resolved config into the input of BuildSpec, reading the seccomp profile
// file when one is configured; the CA certificates were read while resolving.
func (rv *Resolver) SpecInput(r *config.Resolved) (SpecInput, error) {
	in := SpecInput{Name: r.Name, ProjectRoot: r.ProjectRoot, Config: r.Config, Version: rv.Version, ExtraLabels: rv.ExtraLabels,
		CACerts: r.CACertsPEM()}
	if p := r.Config.SeccompProfile; p != "" {
		data, err := config.ReadFileLimit(p, maxSeccompProfile)
		if err != nil {
			return in, errs.Failure(fmt.Errorf("reading seccompProfile %s (from %s): %w", p, r.Source("seccompProfile"), err), "fix the path, or remove the key to use the engine's default profile")
		}
		in.SeccompJSON = data
	}
	return in, nil
}

// Resolve resolves sb's configuration as it stands now: its project (the directory its label
// names) under its name, with the flag settings it was created with and the ports it
// publishes.
func (rv *Resolver) Resolve(sb *Sandbox) (SpecInput, error) {
	return rv.resolve(sb, nil)
}

// resolve is Resolve with the flag settings given now (sbx create's) in place of those the
// sandbox was created with, key by key.
func (rv *Resolver) resolve(sb *Sandbox, now []config.Setting) (SpecInput, error) {
	key := sb.Labels[LabelProject] + "\x00" + sb.Labels[LabelCreateSettings] + "\x00" + sb.Labels[LabelConfig]
	if len(now) == 0 {
		rv.mu.Lock()
		in, ok := rv.memo[key]
		rv.mu.Unlock()
		if ok {
			in.Name = sb.Name
			return in, nil
		}
	}
	settings, err := sb.CreateSettings()
	if err != nil {
		return SpecInput{}, err
	}
	settings = overlaySettings(settings, now)
	inputs := rv.Inputs
	inputs.Name, inputs.ProjectDir, inputs.Flags = sb.Name, sb.Labels[LabelProject], settings
	r, err := config.Resolve(inputs)
	if err != nil {
		return SpecInput{}, err
	}
	in, err := rv.SpecInput(r)
	if err != nil {
		return SpecInput{}, err
	}
	in.Ports, in.CreateSettings = sb.PublishedPorts(), settings
	if len(now) == 0 && !r.DependsOnName() {
		rv.mu.Lock()
		if rv.memo == nil {
			rv.memo = map[string]SpecInput{}
		}
		rv.memo[key] = in
		rv.mu.Unlock()
	}
	return in, nil
}

// overlaySettings is base with every key that now sets replaced by now's settings of it.
func overlaySettings(base, now []config.Setting) []config.Setting {
	if len(now) == 0 {
		return base
	}
	given := map[string]bool{}
	for _, s := range now {
		given[s.Key] = true
	}
	var out []config.Setting
	for _, s := range base {
		if !given[s.Key] {
			out = append(out, s)
		}
	}
	return append(out, now...)
}

// Drift is whether a sandbox's configuration is current, and what it should be.
type Drift struct {
	Current bool
	// Keys are the config keys whose values differ, sorted; none when Current.
	Keys []string
	// Want is the input the sandbox is current with: recreating it from Want applies the change.
	Want SpecInput
}

// Drift tells whether sb's configuration is current and, when it is not, which keys differ.
// exec (through Ensure), cp, create, ls and explain all ask it, so they name the same keys.
//
// The rule: sb is current when its project (the directory its project label names), resolved
// again under its name with the flag settings it was created with and the ports it publishes,
// hashes to the config hash stored on it. The keys are those whose values differ between the
// config shape stored on it and that resolution. A command run without the flags the sandbox
// was created with, or from another directory, therefore sees no change that is not there.
//
// asked, when not nil, is the input the calling command resolved for sb with its own flags,
// from the directory it runs in (create, exec, explain). When it hashes to the stored hash
// the sandbox is what the command asks for, and current, without reading the files again; for
// a command without flags this is the rule's answer too, since flag settings applied again
// to a config that already carries them change nothing. Otherwise only asked's own flag
// settings (CreateSettings: sbx create's flags) play a part: they take the place of the ones
// sb was created with, so "sbx create --memory 2g" on a sandbox made with 600m names memory.
//
// An error means sb's configuration cannot be resolved again (its project is gone, a setting
// it was created with is refused now, its labels are unreadable): whether it is current is
// unknown.
func (rv *Resolver) Drift(sb *Sandbox, asked *SpecInput) (*Drift, error) {
	if asked != nil {
		_, hash, err := asked.Shape()
		if err != nil {
			return nil, err
		}
		if hash == sb.Hash() {
			return &Drift{Current: true, Want: *asked}, nil
		}
	}
	var now []config.Setting
	if asked != nil {
		now = asked.CreateSettings
	}
	want, err := rv.resolve(sb, now)
	if err != nil {
		return nil, err
	}
	shape, hash, err := want.Shape()
	if err != nil {
		return nil, err
	}
	if hash == sb.Hash() {
		return &Drift{Current: true, Want: want}, nil
	}
	return &Drift{Keys: ShapeDiff(sb.Labels[LabelConfig], shape), Want: want}, nil
}
