package cmdutil

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
)

func TestConfigFlagsLayer(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cf := AddConfigFlags(fs)
	if err := fs.Parse([]string{"--memory", "2g", "--env", "A=1", "--env", "B=x,y", "--egress", "@debian", "--egress", "pypi.org", "--bind", "/a:/b:ro", "--pids-limit=64", "--cpus", "1.5"}); err != nil {
		t.Fatal(err)
	}
	flag := func(name string) config.Source { return config.Source{Layer: config.LayerFlag, Name: name} }
	want := []config.Setting{
		{Key: "memory", Values: []string{"2g"}, Source: flag("--memory")},
		{Key: "cpus", Values: []string{"1.5"}, Source: flag("--cpus")},
		{Key: "pidsLimit", Values: []string{"64"}, Source: flag("--pids-limit")},
		{Key: "env", Values: []string{"A=1", "B=x,y"}, Source: flag("--env")},
		{Key: "egress", Values: []string{"@debian", "pypi.org"}, Source: flag("--egress")},
		{Key: "binds", Values: []string{"/a:/b:ro"}, Source: flag("--bind")},
	}
	if got := cf.Layer(); !reflect.DeepEqual(got, want) {
		t.Errorf("layer = %+v\nwant %+v", got, want)
	}
}

func TestConfigFlagsUnsetFormNoLayer(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cf := AddConfigFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got := cf.Layer(); len(got) != 0 {
		t.Errorf("layer = %+v", got)
	}
	// An explicitly empty value was set by the user and counts.
	if err := fs.Parse([]string{"--image="}); err != nil {
		t.Fatal(err)
	}
	if got := cf.Layer(); len(got) != 1 || got[0].Key != "image" {
		t.Errorf("layer = %+v", got)
	}
}

func TestResolveConfigUsesTheFactory(t *testing.T) {
	home, root := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(root, config.ProjectFileName), []byte("memory: 512m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "src")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	ios, _, _, _ := iostreams.Test()
	f := &Factory{
		IOStreams:  ios,
		Global:     &GlobalOptions{},
		Getenv:     func(k string) string { return map[string]string{"SBX_NETWORK": "bridge"}[k] },
		HomeDir:    func() (string, error) { return home, nil },
		WorkingDir: func() (string, error) { return sub, nil },
	}
	r, err := ResolveConfig(f, "web", config.Setting{Key: "cpus", Values: []string{"1"}, Source: config.Source{Layer: config.LayerFlag, Name: "--cpus"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "web" || r.Config.Memory != 512<<20 || r.Config.Network != "bridge" || r.Sources["cpus"].String() != "flag:--cpus" {
		t.Errorf("resolved %s: memory %d network %s cpus from %s", r.Name, r.Config.Memory, r.Config.Network, r.Sources["cpus"])
	}
	if real, _ := filepath.EvalSymlinks(root); r.ProjectRoot != real {
		t.Errorf("project root = %s, want %s", r.ProjectRoot, real)
	}

	f.Global.ConfigFile = "missing.yaml"
	var verr *config.ValidationError
	if _, err := ResolveConfig(f, ""); !errors.As(err, &verr) {
		t.Errorf("missing --config file: %v", err)
	}
}

// A flag of a key with a fixed set of values names every one of them in its help.
func TestConfigFlagsNameEveryValue(t *testing.T) {
	for _, f := range configFlagList {
		usage := f.usageOf()
		if strings.Contains(usage, "{values}") {
			t.Errorf("--%s: %q", f.flag, usage)
		}
		for _, v := range config.Values(f.key) {
			if !strings.Contains(usage, v) {
				t.Errorf("--%s: %q does not name %s", f.flag, usage, v)
			}
		}
	}
	if got := (configFlag{key: "workspace", usage: "`MODE`: {values}"}).usageOf(); got != "`MODE`: none, ro, rw or overlay" {
		t.Errorf("workspace: %q", got)
	}
}
