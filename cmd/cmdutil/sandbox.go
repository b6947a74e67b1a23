package cmdutil

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/buildinfo"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/explain"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/transfer"
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

// Manager dials the engine and returns a sandbox manager that reports progress on stderr,
// builds missing bundled images and the images of setup on first use, and pulls other
// missing images with the user's registry credentials. It first removes what killed --rm commands
// left (sweepThrowaways), so every command that reaches the engine cleans up after them.
func Manager(ctx context.Context, f *Factory) (*sandbox.Manager, error) {
	eng, err := f.Engine(ctx)
	if err != nil {
		return nil, err
	}
	ep, err := f.Endpoint()
	if err != nil {
		return nil, err
	}
	m := manager(f, eng, ep)
	sweepThrowaways(ctx, f, m)
	return m, nil
}

// manager is the sandbox manager of Manager on eng, the engine at ep.
func manager(f *Factory, eng engine.Engine, ep engine.Endpoint) *sandbox.Manager {
	home, _ := f.HomeDir()
	// A socket on this machine: an engine that sees its files, and whose networks may be this
	// machine's (avoiding them as well costs a VM engine a few subnets at most).
	local := sandbox.AgentsSupported(eng.DaemonHost())
	m := &sandbox.Manager{
		Engine: eng,
		State:  &sandbox.StateStore{Dir: StateDir(f), Now: f.Now},
		Now:    f.Now,
		Agents: local,
		// Sandboxes run this binary as their agent.
		AgentBinary:  executable(),
		HostPaths:    local,
		HostNetworks: hostNetworks(local),
		Carry:        engine.Remote(ep.Host),
		Warn:         f.IOStreams.ErrOut,
		HomeDir:      home,
		Resolver:     Resolver(f),
	}
	progress := &BuildProgress{Out: f.IOStreams.ErrOut, TTY: f.IOStreams.IsStderrTTY(), Quiet: f.IOStreams.Quiet(), Now: f.Now}
	if !f.IOStreams.Quiet() {
		m.Progress = f.IOStreams.ErrOut
	}
	if f.Global.Debug {
		m.Debug = f.IOStreams.ErrOut
	}
	m.BuildImage = func(ctx context.Context, image string) error {
		_, err := (&imagebuild.Images{Engine: eng, Now: f.Now, Auth: RegistryAuth(f)}).Ensure(ctx, image, progress.Show)
		return err
	}
	m.BuildProgress = progress.Show
	m.Refill = func(name string) { refill(f, name) }
	m.Carrier = transfer.New(m)
	return m
}

// Resolver resolves configs for sandboxes as f's commands do, with no flags of their own.
func Resolver(f *Factory) *sandbox.Resolver {
	rv := &sandbox.Resolver{Inputs: ConfigInputs(f, ""), Version: buildinfo.Get().Version}
	if v := f.Getenv(TestLabelEnv); v != "" {
		rv.ExtraLabels = map[string]string{"sbx.test": v}
	}
	return rv
}

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

// LiveState asks the engine what explain shows about a sandbox: whether it exists and runs,
// and whether its config is current (sandbox.Resolver.Drift, with r as the config explain
// asks about). An unreachable engine is reported, not fatal.
func LiveState(ctx context.Context, f *Factory, r *config.Resolved) (*explain.Live, error) {
	m, err := Manager(ctx, f)
	if err != nil {
		return &explain.Live{Error: err.Error()}, nil
	}
	live := &explain.Live{Reachable: true}
	kind, problem, err := m.EngineKind(ctx)
	if err != nil {
		return &explain.Live{Error: err.Error()}, nil
	}
	live.Kind, live.LimitsProblem = kind.String(), problem
	if len(r.Config.Egress) > 0 {
		live.EgressPath = sandbox.EgressPath(kind)
	}
	create := "sbx create"
	if !r.IsDefaultName {
		create += " -n " + r.Name
	}
	if r.Config.Pool > 0 {
		if live.Pool, err = poolState(ctx, m, r); err != nil {
			return nil, err
		}
	}
	sb, err := m.Inspect(ctx, r.Name)
	if sandbox.IsNotFound(err) {
		live.ApplyCommand = create
		live.Carriage = m.NewCarriage(r.Config.Workspace)
		live.Commands, live.CommandsWhy = m.CommandPath(nil, r.Config)
		live.Toolbox = m.WouldMountToolbox(r.Config)
		return live, nil
	}
	if err != nil {
		return nil, err
	}
	live.Exists, live.Status, live.Running = true, sb.Status, sb.Status == "running"
	live.Carriage = sandbox.CarriageOf(sb)
	live.Commands, live.CommandsWhy = m.CommandPath(sb, r.Config)
	live.Toolbox = sb.Labels[sandbox.LabelToolbox] != ""
	in, err := m.Resolver.SpecInput(r)
	if err != nil {
		return nil, err
	}
	// A config that cannot be resolved again shows as differing, with no keys to name.
	d, err := m.Resolver.Drift(sb, &in)
	live.HashMatches = err == nil && d.Current
	if !live.HashMatches {
		if err == nil {
			live.DifferingKeys = d.Keys
		}
		live.ApplyCommand = create + " --replace"
	}
	return live, nil
}

// poolState is what the pool holds for r's configuration, or why it is not pooled.
func poolState(ctx context.Context, m *sandbox.Manager, r *config.Resolved) (*explain.Pool, error) {
	in, err := m.Resolver.SpecInput(r)
	if err != nil {
		return nil, err
	}
	st := &explain.Pool{Size: r.Config.Pool, NotPooled: sandbox.Unpoolable(in)}
	if st.NotPooled != "" {
		return st, nil
	}
	if st.Key, err = sandbox.PoolKey(in); err != nil {
		return nil, err
	}
	list, err := m.ListPool(ctx, st.Key)
	for _, p := range list {
		if p.Status == "running" {
			st.Ready++
		}
	}
	return st, err
}

// executable is this sbx's binary on the host, links resolved, or "" when it cannot tell.
func executable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		return real
	}
	return exe
}

// hostNetworks lists the IPv4 networks this machine has an address in, when local (the
// engine runs on this machine); nil otherwise. An error reading them gives none: the engine
// still refuses a subnet overlapping its own networks.
func hostNetworks(local bool) func() []netip.Prefix {
	if !local {
		return nil
	}
	return func() []netip.Prefix {
		addrs, _ := net.InterfaceAddrs()
		var out []netip.Prefix
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if p, err := netip.ParsePrefix(n.String()); err == nil && p.Addr().Is4() {
				out = append(out, p.Masked())
			}
		}
		return out
	}
}
