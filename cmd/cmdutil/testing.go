package cmdutil

import (
	"context"
	"io/fs"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
)

// TestFactory is a Factory for command tests: buffered streams, env from a map, a fixed clock,
// home and working directory as given, umask 022, and eng (a fake) as the engine.
func TestFactory(ios *iostreams.IOStreams, env map[string]string, home, wd string, now time.Time, eng engine.Engine) *Factory {
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return &Factory{
		IOStreams:  ios,
		Global:     &GlobalOptions{},
		Getenv:     func(k string) string { return env[k] },
		LookupEnv:  lookup,
		Environ:    func() []string { return nil },
		HomeDir:    func() (string, error) { return home, nil },
		WorkingDir: func() (string, error) { return wd, nil },
		Now:        func() time.Time { return now },
		Umask:      func() fs.FileMode { return 0o022 },
		Endpoint: func() (engine.Endpoint, error) {
			return engine.Endpoint{Host: "unix:///fake.sock", Source: "test"}, nil
		},
		Engine: func(context.Context) (engine.Engine, error) { return eng, nil },
	}
}

// TrustFile records the project file at path, as it is now, as one f's user trusted, as
// "sbx trust --yes" does.
func TrustFile(f *Factory, path string) error {
	sum, err := config.FileHash(path)
	if err != nil {
		return err
	}
	_, err = TrustStore(f).Trust(path, sum)
	return err
}
