package cmdutil

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sbx-sandbox/sbx/pkg/config"
)

// ConfigFlags are the flags for the common config keys, shared by every command that resolves
// a sandbox's config. Only the flags the user set form the flag layer.
type ConfigFlags struct {
	fs    *pflag.FlagSet
	omit  []string
	lists map[string]*[]string // the values of the repeatable flags, by flag
}

// configFlag ties a flag to the config key it sets.
type configFlag struct {
	flag, key, usage string
	list             bool
}

var configFlagList = []configFlag{
	{flag: "profile", key: "profile", usage: "bundled image and settings, `NAME`: {values}"},
	{flag: "image", key: "image", usage: "`IMAGE` to run instead of the profile's"},
	{flag: "workspace", key: "workspace", usage: "project root at /workspace, `MODE`: {values}"},
	{flag: "network", key: "network", usage: "`NETWORK`: none, bridge or a user-defined network"},
	{flag: "memory", key: "memory", usage: "memory limit `SIZE` such as 512m or 2g"},
	{flag: "cpus", key: "cpus", usage: "CPU limit `N` such as 1.5"},
	{flag: "pids-limit", key: "pidsLimit", usage: "maximum number of processes (`N`, at least 16)"},
	{flag: "env", key: "env", list: true, usage: "set `NAME=VALUE` on the sandbox (repeatable)"},
	{flag: "egress", key: "egress", list: true, usage: "let the sandbox reach `DEST` through sbx's proxy: a name, address, network or @preset (repeatable; network none)"},
	{flag: "bind", key: "binds", list: true, usage: "bind `HOST:CONTAINER[:ro]` (repeatable; HOST absolute, inside the project)"},
	{flag: "user", key: "user", usage: "numeric `uid:gid` to run as"},
	{flag: "isolation", key: "isolation", usage: "kernel boundary `LEVEL`: container, or gvisor (gVisor's user-space kernel)"},
	{flag: "runtime", key: "runtime", usage: "OCI `RUNTIME` registered with the engine, for runtimes other than gVisor"},
	{flag: "idle-stop", key: "idleStop", usage: "stop the sandbox after `DURATION` unused, such as 15m (0: never)"},
}

// usageOf is f's usage, "{values}" in it replaced by the values the config resolver takes
// for its key ("none, ro, rw or overlay"), so that the help names every one.
func (f configFlag) usageOf() string {
	vs := config.Values(f.key)
	if len(vs) == 0 {
		return f.usage
	}
	return strings.Replace(f.usage, "{values}", strings.Join(vs[:len(vs)-1], ", ")+" or "+vs[len(vs)-1], 1)
}

// AddConfigFlags adds --profile --image --workspace --network --memory --cpus --pids-limit
// --env --egress --bind --user --isolation --runtime --idle-stop to fs, but those named in omit (a command whose
// flag of that name means something else). Values are checked by the config resolver, so a
// bad one is reported with its flag like any other refused setting.
func AddConfigFlags(fs *pflag.FlagSet, omit ...string) *ConfigFlags {
	c := &ConfigFlags{fs: fs, omit: omit, lists: map[string]*[]string{}}
	for _, f := range configFlagList {
		switch {
		case slices.Contains(omit, f.flag):
		case f.list:
			c.lists[f.flag] = new([]string)
			ListVarP(fs, c.lists[f.flag], f.flag, "", f.usageOf())
		default:
			fs.String(f.flag, "", f.usageOf())
		}
	}
	return c
}

// Layer returns the settings of the flags the user actually set, with sources flag:--x.
func (c *ConfigFlags) Layer() []config.Setting {
	if c == nil {
		return nil
	}
	var out []config.Setting
	for _, f := range configFlagList {
		if slices.Contains(c.omit, f.flag) || !c.fs.Changed(f.flag) {
			continue
		}
		var values []string
		if f.list {
			values = *c.lists[f.flag]
		} else {
			v, _ := c.fs.GetString(f.flag)
			values = []string{v}
		}
		out = append(out, config.Setting{Key: f.key, Values: values, Source: config.Source{Layer: config.LayerFlag, Name: "--" + f.flag}})
	}
	return out
}

// ConfigInputs gathers what the config resolver reads, from the Factory's lazy functions.
func ConfigInputs(f *Factory, name string, flags ...config.Setting) config.Inputs {
	return config.Inputs{
		Getenv:     f.Getenv,
		HomeDir:    f.HomeDir,
		WorkingDir: f.WorkingDir,
		ProjectDir: f.Global.ProjectDir,
		ConfigFile: f.Global.ConfigFile,
		Name:       name,
		Flags:      flags,
		HostCPUs:   runtime.NumCPU(),
		HostMemory: hostMemory(),
		Trust:      TrustStore(f),
	}
}

// TrustStore is the user's record of trusted project files, in sbx's state directory.
func TrustStore(f *Factory) *config.TrustStore {
	return &config.TrustStore{Path: filepath.Join(StateDir(f), "trust.json"), Now: f.Now}
}

// ResolveConfig resolves the config of sandbox name ("" for the project's default) with the
// given flag layer. It reads files and the environment only; it never dials the engine. On a
// refused setting it returns the Resolved along with a *config.ValidationError. A config file
// that discovery passed over because another user controls it is named on stderr.
func ResolveConfig(f *Factory, name string, flags ...config.Setting) (*config.Resolved, error) {
	r, err := config.Resolve(ConfigInputs(f, name, flags...))
	if r != nil {
		for _, s := range r.Skipped {
			fmt.Fprintf(f.IOStreams.ErrOut, "warning: %s\n", SafeText(s.String()))
		}
	}
	return r, err
}
