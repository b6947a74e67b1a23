// Package cmdutil holds what every command shares: the Factory of lazy dependencies, the
// global options, and output helpers.
package cmdutil

import (
	"context"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// GlobalOptions are the root command's persistent flags.
type GlobalOptions struct {
	ConfigFile string // --config: an extra config file layer
	ProjectDir string // --project: project root override
	Context    string // --context: the docker context whose engine to use
	Debug      bool   // --debug: log Docker API calls and agent fallbacks to stderr
	Quiet      bool   // -q/--quiet
}

// Factory hands commands their dependencies. Everything that touches the outside world is a
// function, called only when a command needs it, so --help and config errors never dial.
type Factory struct {
	IOStreams  *iostreams.IOStreams
	Global     *GlobalOptions
	Getenv     func(string) string
	LookupEnv  func(string) (string, bool)
	Environ    func() []string
	HomeDir    func() (string, error)
	WorkingDir func() (string, error)
	Now        func() time.Time
	// Umask is the umask sbx was started with, for the files it creates on the user's behalf.
	Umask func() fs.FileMode

	// Endpoint resolves which engine to use without dialling it.
	Endpoint func() (engine.Endpoint, error)
	// Engine dials the engine once and reuses the connection.
	Engine func(ctx context.Context) (engine.Engine, error)

	// refills are the sandboxes whose pool StartRefills refills (refill.go).
	refills *[]string
}

// ForContext is a copy of f whose engine is docker context name's, dialled on first use.
func (f *Factory) ForContext(name string) *Factory {
	c := *f
	global := *f.Global
	global.Context = name
	c.Global = &global
	c.Endpoint = func() (engine.Endpoint, error) {
		home, _ := c.HomeDir()
		return engine.ResolveEndpoint(c.Getenv, home, name)
	}
	c.Engine = engineOnce(&c)
	return &c
}

// New returns the Factory for the real process.
func New() *Factory {
	f := &Factory{
		Global:     &GlobalOptions{},
		Getenv:     os.Getenv,
		LookupEnv:  os.LookupEnv,
		Environ:    os.Environ,
		HomeDir:    os.UserHomeDir,
		WorkingDir: os.Getwd,
		Now:        time.Now,
		Umask:      sync.OnceValue(processUmask),
		refills:    new([]string),
	}
	f.IOStreams = iostreams.System(f.Getenv)
	f.Endpoint = func() (engine.Endpoint, error) {
		home, _ := f.HomeDir()
		return engine.ResolveEndpoint(f.Getenv, home, f.Global.Context)
	}
	f.Engine = engineOnce(f)
	return f
}

func engineOnce(f *Factory) func(ctx context.Context) (engine.Engine, error) {
	var (
		mu  sync.Mutex
		eng engine.Engine
	)
	return func(ctx context.Context) (engine.Engine, error) {
		mu.Lock()
		defer mu.Unlock()
		if eng != nil {
			return eng, nil
		}
		ep, err := f.Endpoint()
		if err != nil {
			return nil, errs.Failure(err, "fix the Docker context (docker context ls), or choose another with --context, SBX_CONTEXT or DOCKER_CONTEXT")
		}
		var debug io.Writer
		if f.Global.Debug {
			debug = f.IOStreams.ErrOut
		}
		cli, err := engine.Connect(ctx, ep, debug)
		if err != nil {
			return nil, err
		}
		eng = cli
		return eng, nil
	}
}
