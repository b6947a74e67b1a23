package cmdutil

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// EnsureSandbox dials the engine and makes sure the sandbox of r exists and runs, as exec
// does: created on first use, resumed when paused, recreated when it is not current
// (sandbox.Resolver.Drift) and has been idle, else used as it is with a warning on stderr. It
// records the use. The sandbox is leased, so maxRunning does not evict it, until the caller
// calls release.
func EnsureSandbox(ctx context.Context, f *Factory, r *config.Resolved) (m *sandbox.Manager, sb *sandbox.Sandbox, release func(), err error) {
	m, err = Manager(ctx, f)
	if err != nil {
		return nil, nil, nil, err
	}
	in, err := m.Resolver.SpecInput(r)
	if err != nil {
		return nil, nil, nil, err
	}
	res, err := m.Ensure(ctx, in, sandbox.EnsureOptions{RecreateIfIdle: true})
	if err != nil {
		return nil, nil, nil, err
	}
	WarnDrift(f.IOStreams, r.Name, res.Drift)
	if res.Created {
		WarnCreated(f.IOStreams, r)
	}
	_ = m.State.Touch(r.Name)
	return m, res.Sandbox, res.Lease.Release, nil
}

// WarnDrift says on stderr that sandbox name runs with an older configuration when keys (the
// ones that differ) are not empty.
func WarnDrift(io *iostreams.IOStreams, name string, keys []string) {
	if len(keys) > 0 {
		fmt.Fprintf(io.ErrOut, "warning: sandbox %q runs with an older configuration (changed: %s)\nhint: apply it with: sbx create -n %s --replace\n",
			name, strings.Join(keys, ", "), name)
	}
}

// WarnCreated says on stderr, when a sandbox was just made, what of its configuration will
// not work as the user likely expects: the sandbox's user and its workspace's owner.
func WarnCreated(io *iostreams.IOStreams, r *config.Resolved) {
	for _, w := range r.Warnings {
		if w.Key == "user" {
			fmt.Fprintf(io.ErrOut, "warning: %s\nhint: %s\n", w.String(), w.Fix)
		}
	}
}

// RunningSandbox returns sandbox name (the project's default when "") without creating or
// starting it (sandbox.Manager.Running), for the commands that look at what runs inside one
// (ps, logs, kill). They act on processes that exec started, so the exec tool policy governs
// them too. The sandbox is leased until the caller calls release.
func RunningSandbox(ctx context.Context, f *Factory, name string) (m *sandbox.Manager, sb *sandbox.Sandbox, release func(), err error) {
	r, err := ResolveConfig(f, name)
	if r == nil {
		return nil, nil, nil, err
	}
	if err := config.CheckTool(r, config.ToolExec); err != nil {
		return nil, nil, nil, err
	}
	if r.ExecsOnHost() {
		return nil, nil, nil, HostModeError(r)
	}
	m, err = Manager(ctx, f)
	if err != nil {
		return nil, nil, nil, err
	}
	sb, lease, err := m.Running(ctx, r.Name, r.Config)
	if err != nil {
		return nil, nil, nil, err
	}
	return m, sb, lease.Release, nil
}

// HostModeError refuses a command that only makes sense in a sandbox when mode says this
// sandbox's commands run on the host.
func HostModeError(r *config.Resolved) error {
	return errs.Failure(fmt.Errorf("this needs a sandbox, but mode %s (from %s) runs %q's commands on the host", r.Config.Mode, r.Source("mode"), r.Name),
		"set mode: all, or name a sandbox with -n")
}

// CheckName checks the sandbox name a -n flag gave; "" (the project's default) passes.
func CheckName(name string) error {
	if name == "" {
		return nil
	}
	if err := config.ValidName(name); err != nil {
		return errs.Usagef("%v", err)
	}
	return nil
}

// PassEnv returns the host's values of the passEnv names, as NAME=VALUE.
func PassEnv(f *Factory, r *config.Resolved) []string {
	var env []string
	for _, name := range r.Config.PassEnv {
		if v, ok := f.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// ResolveForSandboxCommand resolves sandbox name's config for a command that must run inside
// it (run, sh): the exec tool policy must allow it and mode must not send it to the host.
func ResolveForSandboxCommand(f *Factory, name string) (*config.Resolved, error) {
	r, err := ResolveConfig(f, name)
	if err != nil {
		return nil, err
	}
	if err := config.CheckTool(r, config.ToolExec); err != nil {
		return nil, err
	}
	if r.ExecsOnHost() {
		return nil, HostModeError(r)
	}
	return r, nil
}

// Timeout is the --timeout flag's value when the user set it, else the timeout key's.
func Timeout(r *config.Resolved, flagSet bool, flag time.Duration) time.Duration {
	if flagSet {
		return flag
	}
	return r.Config.Timeout
}
