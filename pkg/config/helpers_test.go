package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/cacerts/cacertstest"
)

// fixture is a project and a home directory in temp dirs, with the environment and flags
// Resolve will see.
type fixture struct {
	t          *testing.T
	home, root string
	env        map[string]string
	flags      []Setting
	name       string
	configFile string
	hostCPUs   int
	// trusted makes the project file, as it is when Resolve runs, one the user trusted.
	trusted bool
	// hostCAs is where caCerts: host looks: ~/.host-cas, empty unless a test writes there.
	hostCAs string
	caPEM   string // ca's certificate
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	home := filepath.Join(canonical(t.TempDir()), "home", "user")
	root := filepath.Join(canonical(t.TempDir()), "proj")
	for _, d := range []string{home, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{t: t, home: home, root: root, env: map[string]string{}, hostCPUs: 4, hostCAs: filepath.Join(home, ".host-cas")}
}

// path maps "~/x" into the home, "/abs" unchanged, and anything else into the project.
func (f *fixture) path(p string) string {
	switch {
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(f.home, p[2:])
	case filepath.IsAbs(p):
		return p
	}
	return filepath.Join(f.root, p)
}

// write creates a file; "@" in content stands for the project root and "$H" for the home.
func (f *fixture) write(p, content string) string {
	f.t.Helper()
	content = strings.NewReplacer("@", f.root, "$H", f.home).Replace(content)
	full := f.path(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return full
}

func (f *fixture) mkdir(p string) string {
	f.t.Helper()
	full := f.path(p)
	if err := os.MkdirAll(full, 0o755); err != nil {
		f.t.Fatal(err)
	}
	return full
}

// ca is a CA certificate as PEM, the same one for the whole fixture.
func (f *fixture) ca() string {
	if f.caPEM == "" {
		f.caPEM = string(cacertstest.CA(f.t, "test CA"))
	}
	return f.caPEM
}

func (f *fixture) userFile(content string) string {
	return f.write("~/.config/sbx/config.yaml", content)
}

func (f *fixture) projectFile(content string) string { return f.write(ProjectFileName, content) }

// flag sets a flag-layer value; "@" in values stands for the project root.
func (f *fixture) flag(key string, values ...string) {
	for i := range values {
		values[i] = strings.ReplaceAll(values[i], "@", f.root)
	}
	f.flags = append(f.flags, Setting{Key: key, Values: values, Source: Source{Layer: LayerFlag, Name: "--" + key}})
}

func (f *fixture) inputs() Inputs {
	store := f.store()
	in := Inputs{
		Trust:       store,
		Getenv:      func(k string) string { return f.env[k] },
		HomeDir:     func() (string, error) { return f.home, nil },
		WorkingDir:  func() (string, error) { return f.root, nil },
		ConfigFile:  f.configFile,
		Name:        f.name,
		Flags:       f.flags,
		HostCPUs:    f.hostCPUs,
		GitTopLevel: func(string) (string, bool) { return "", false },
		FileOwner:   func(string) (int, int, error) { return 1234, 5678, nil },
		HostCADirs:  []string{f.hostCAs},
	}
	if f.trusted {
		// As "sbx trust" does: the file and what it points to, as they are now.
		rev, err := ReviewProject(in)
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := store.Trust(rev.Trust.File, rev.Trust.SHA256, rev.Trust.Files...); err != nil {
			f.t.Fatal(err)
		}
	}
	return in
}

// store is the fixture user's trust store.
func (f *fixture) store() *TrustStore {
	return &TrustStore{Path: filepath.Join(f.home, ".state", "sbx", "trust.json"), Now: func() time.Time { return time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC) }}
}

func (f *fixture) resolve() (*Resolved, error) {
	f.t.Helper()
	return Resolve(f.inputs())
}

// mustResolve resolves and fails the test on any error.
func (f *fixture) mustResolve() *Resolved {
	f.t.Helper()
	r, err := f.resolve()
	if err != nil {
		f.t.Fatalf("resolve: %v", err)
	}
	return r
}

// value renders the resolved value of a key path as explain shows it.
func value(r *Resolved, key string) string {
	for _, e := range r.Entries() {
		if e.Key == key {
			return e.Value
		}
	}
	return "<no such key " + key + ">"
}
