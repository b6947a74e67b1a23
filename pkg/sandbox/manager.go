package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/protect"
)

// IdleRecreate is how long a sandbox must have been idle before exec replaces it on its own
// when its configuration changed; a busier one keeps running and the user is told.
const IdleRecreate = 5 * time.Minute

// Manager runs the sandbox lifecycle against an engine.
type Manager struct {
	Engine engine.Engine
	State  *StateStore
	Now    func() time.Time
	// Progress receives one-line announcements for stderr (created, recreated, started).
	Progress io.Writer
	// BuildImage builds a missing bundled image or pulls another; nil means a missing image
	// is an error.
	BuildImage func(ctx context.Context, image string) error
	// BuildProgress receives the events of the build of an image derived for setup (setup.go).
	BuildProgress imagebuild.Progress
	// Agents gives new sandboxes the agent (agent.go); set it only when AgentsSupported says
	// the engine can mount this machine's directories.
	Agents bool
	// AgentBinary is this sbx's binary on the host, which sandboxes mount and run as their
	// agent; "" gives none an agent.
	AgentBinary string
	agentBin    agentBinary
	// Protect plans the protected paths of a new rw sandbox; nil means Protection with
	// HomeDir. Tests with a fake engine and no project on disk replace it.
	Protect func(projectRoot string, cfg config.Config) (*protect.Plan, error)
	// HostPaths says the engine sees this machine's files (a local engine), which workspace
	// overlay needs: its layers are directories here.
	HostPaths bool
	// HostNetworks lists the networks the engine's host has an address in, which egress
	// networks must avoid; nil when they are unknown (an engine on another machine or in a VM,
	// whose own networks the engine lists).
	HostNetworks func() []netip.Prefix
	// Carry copies a ro or rw workspace into the sandbox instead of binding the project: the
	// engine is remote (engine.Remote), so the project's path is not there (carry.go).
	Carry bool
	// Carrier copies a carried workspace in and out (pkg/transfer); without one, creating or
	// reviewing a carried workspace fails.
	Carrier Carrier
	// HomeDir is the user's home, where git config paths written ~/ start.
	HomeDir string
	// Warn receives warnings for stderr, which quiet does not silence.
	Warn io.Writer
	// Debug, when set (--debug), receives a line for each decision a user may want to see
	// explained, such as a command going through the engine's exec instead of the agent.
	Debug io.Writer
	// Resolver resolves an existing sandbox's config again, to tell whether it is current
	// (Drift). Ensure needs it when a sandbox exists with another config hash than the input.
	Resolver *Resolver
	// Refill, when set, is called with the sandbox's name after Ensure took it from the pool
	// (pool.go), or found the pool empty; it must return at once (cmdutil: a detached sbx
	// pool fill once the command has ended), so the command does not wait for a fill.
	Refill func(name string)

	factsMu     sync.Mutex
	engineFacts *engineFacts // facts (enginekind.go)
}

// Sandbox is an existing sandbox as the engine reports it.
type Sandbox struct {
	Name string
	// Key is the name it was made under, which its volume, network and agent directory
	// carry: Name, or for a sandbox taken from the pool its pool name (pool.go).
	Key       string
	ID        string
	Status    string // created, running, paused, restarting, exited, dead
	Labels    map[string]string
	Image     string
	CreatedAt time.Time
	Ports     []string // published ports as HOSTIP:HOSTPORT->PORT/PROTO (List only)
	// WritableHostPaths are the host directories and files the sandbox can write through
	// its bind mounts, as the engine reports them (Inspect only).
	WritableHostPaths []string
	// agent is the greeted connection to its agent that Warm left for the next command.
	agent *agent.Client
}

// key is the name the sandbox's volume, network and agent directory were made under.
func (s *Sandbox) key() string {
	if s.Key != "" {
		return s.Key
	}
	return s.Name
}

// WorkspaceVolume is the volume of a sandbox in workspace mode none.
func (s *Sandbox) WorkspaceVolume() string { return VolumeName(s.key()) }

// Hash is the config hash the sandbox was created with.
func (s *Sandbox) Hash() string { return s.Labels[LabelConfigHash] }

// CreateSettings are the flag settings the sandbox was created with.
func (s *Sandbox) CreateSettings() ([]config.Setting, error) {
	raw := s.Labels[LabelCreateSettings]
	if raw == "" {
		return nil, nil
	}
	var settings []config.Setting
	if err := json.Unmarshal([]byte(raw), &settings); err != nil {
		return nil, fmt.Errorf("sandbox %q: reading its %s label: %w", s.Name, LabelCreateSettings, err)
	}
	return settings, nil
}

// fromShape fills the fields of v from the sandbox's config label; a label from another
// version leaves what it lacks zero.
func (s *Sandbox) fromShape(v any) { _ = json.Unmarshal([]byte(s.Labels[LabelConfig]), v) }

// PublishedPorts are the container ports the sandbox publishes, from its config label.
func (s *Sandbox) PublishedPorts() []string {
	var shape struct {
		Ports []string `json:"ports"`
	}
	s.fromShape(&shape)
	return shape.Ports
}

// IdleStop is the sandbox's idleStop, from its config label: 0 when it never stops by itself.
func (s *Sandbox) IdleStop() time.Duration {
	var shape struct {
		IdleStop time.Duration `json:"idleStop"`
	}
	s.fromShape(&shape)
	return shape.IdleStop
}

// memoryLimit is the sandbox's memory limit in bytes, from its config label (0: unknown).
func (s *Sandbox) memoryLimit() int64 {
	var shape struct {
		Memory int64 `json:"memory"`
	}
	s.fromShape(&shape)
	return shape.Memory
}

// hasOwnNetwork reports whether the sandbox was made with a network of its own (network.go).
func (s *Sandbox) hasOwnNetwork() bool {
	var shape struct {
		Own bool `json:"ownNetwork"`
	}
	s.fromShape(&shape)
	return shape.Own
}

// hasCACerts reports whether the sandbox was made with a CA bundle (cacerts.go).
func (s *Sandbox) hasCACerts() bool {
	var shape struct {
		CA json.RawMessage `json:"caCerts"`
	}
	s.fromShape(&shape)
	return len(shape.CA) > 0
}

// EnsureOptions says what to do when the sandbox exists with another configuration.
type EnsureOptions struct {
	// Replace removes and recreates it from the input whenever its config hash differs,
	// without asking Drift: the input is what the user wants now (sbx create --replace).
	Replace bool
	// RecreateIfIdle recreates a sandbox that is not current (Drift) when idle for
	// IdleRecreate or longer; otherwise it is used as it is and Ensure reports the drift. One
	// whose config cannot be resolved again is used as it is: there is nothing to recreate
	// it from.
	RecreateIfIdle bool
	// KeepRunning, with RecreateIfIdle, uses a running sandbox as it is however long it has
	// been idle (sbx cp: recreating it would lose the tmpfs files a copy out may be after).
	KeepRunning bool
	// MustExist makes a missing sandbox a *NotFoundError instead of creating it.
	MustExist bool
}

// EnsureResult is what Ensure found or made.
type EnsureResult struct {
	Sandbox *Sandbox
	Created bool
	// Pooled says the sandbox was taken from the pool (pool.go) rather than created.
	Pooled bool
	// poolMissed says it was created because its pool had none ready.
	poolMissed bool
	// Drift lists the keys that differ (Drift.Keys) when the existing sandbox was kept
	// anyway (RecreateIfIdle on a busy sandbox).
	Drift []string
	// Lease keeps maxRunning from evicting the sandbox until the caller releases it (nil
	// without a state store).
	Lease *Lease
}

// DriftError reports a sandbox whose configuration differs from the resolved one.
type DriftError struct {
	Name string
	Keys []string
}

func (e *DriftError) Error() string {
	return fmt.Sprintf("sandbox %q exists with a different configuration (changed: %s)", e.Name, strings.Join(e.Keys, ", "))
}
func (e *DriftError) ExitCode() int { return errs.CodeFailure }
func (e *DriftError) Hint() string {
	return fmt.Sprintf("run \"sbx create -n %s --replace\" to recreate it (its tmpfs contents are lost; the workspace is kept), or \"sbx explain %s\" to compare", e.Name, e.Name)
}

// NotManagedError is a container with a sandbox's name that sbx did not create.
type NotManagedError struct{ Container string }

func (e *NotManagedError) Error() string {
	return fmt.Sprintf("container %q exists but was not created by sbx (no %s=true label); sbx will not touch it", e.Container, LabelManaged)
}
func (e *NotManagedError) ExitCode() int { return errs.CodeFailure }
func (e *NotManagedError) Hint() string {
	return "pick another sandbox name with -n, or rename that container"
}

// Ensure makes sure the sandbox described by in exists and runs, resuming it when paused and
// keeping within maxRunning when it must start it. It is safe to call from many processes at
// once: the engine's name conflict decides who creates, and the others adopt it. The result
// holds a lease on the sandbox, taken first, which the caller releases when its command ends.
func (m *Manager) Ensure(ctx context.Context, in SpecInput, opts EnsureOptions) (*EnsureResult, error) {
	lease, err := m.leaseForUse(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	res, err := m.ensure(ctx, in, opts)
	if err != nil {
		lease.Release()
		return nil, err
	}
	if res.Pooled && lease != nil {
		// The lease took the idle lock before the claim gave the name the agent's.
		if lease.idle != nil {
			lease.idle.Close()
			lease.idle = nil
		}
		m.holdIdleLock(ctx, lease, in.Name)
	}
	if (res.Pooled || res.poolMissed) && m.Refill != nil {
		m.Refill(in.Name)
	}
	res.Lease = lease
	return res, nil
}

func (m *Manager) ensure(ctx context.Context, in SpecInput, opts EnsureOptions) (*EnsureResult, error) {
	_, hash, err := in.Shape()
	if err != nil {
		return nil, err
	}
	name := ContainerName(in.Name)
	recreating := false // this call removed the sandbox to create it again
	poolMissed := false
	for attempt := 0; attempt < 100; attempt++ {
		sb, err := m.Inspect(ctx, in.Name)
		if IsNotFound(err) && opts.MustExist && !recreating {
			return nil, err
		}
		if IsNotFound(err) && in.Config.Pool > 0 && Unpoolable(in) == "" && m.State != nil {
			claimed, err := m.claimPooled(ctx, in)
			if errors.Is(err, errNameTaken) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if claimed != nil {
				return &EnsureResult{Sandbox: claimed, Created: true, Pooled: true}, nil
			}
			poolMissed = true
		}
		if IsNotFound(err) {
			created, err := m.createLocked(ctx, in)
			if errors.Is(err, errNameTaken) {
				continue
			}
			if cerrdefs.IsConflict(err) {
				// Another sbx holds the name; the engine answers "not found" for it until its
				// create completes, so wait a moment before adopting theirs.
				if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			var startErr error
			if err := m.admit(ctx, in.Config, in.Name, func(ctx context.Context) error {
				startErr = m.start(ctx, created)
				return startErr
			}); err != nil {
				if startErr != nil {
					// The engine refused to start what it just created (a network that does not
					// exist, say): leave no half-made sandbox behind.
					_ = m.removeContainer(context.WithoutCancel(ctx), created, false)
				}
				return nil, err
			}
			created.Status = "running"
			if created.Labels[LabelCarry] != "" {
				if err := m.carryIn(ctx, in, created); err != nil {
					_ = m.Remove(context.WithoutCancel(ctx), in.Name, true)
					return nil, err
				}
			}
			return &EnsureResult{Sandbox: created, Created: true, poolMissed: poolMissed}, nil
		}
		if err != nil {
			return nil, err
		}
		res := &EnsureResult{Sandbox: sb}
		recreate := opts.Replace && sb.Hash() != hash
		if !opts.Replace {
			d, err := m.Resolver.Drift(sb, &in)
			switch {
			case err != nil && !opts.RecreateIfIdle:
				return nil, errs.Failure(fmt.Errorf("checking whether sandbox %q is current: %w", in.Name, err),
					fmt.Sprintf("recreate it from this project with: sbx create -n %s --replace", in.Name))
			case err != nil || d.Current:
			case m.recreateIdle(sb, d.Keys, opts):
				in, recreate = d.Want, true
			case opts.RecreateIfIdle:
				res.Drift = d.Keys
			default:
				return nil, &DriftError{Name: in.Name, Keys: d.Keys}
			}
		}
		if recreate {
			if err := m.removeContainer(ctx, sb, false); err != nil {
				return nil, err
			}
			if sb.key() != sb.Name {
				// Taken from the pool: what it was made with is named after its pool name, so
				// the new one cannot keep it (its workspace volume included), and it goes.
				if err := m.removeLeftovers(ctx, sb.key()); err != nil {
					return nil, err
				}
			}
			recreating = true
			continue
		}
		if sb.Status != "running" { // paused, or created (left by a killed sbx), exited, dead
			if sb.Status == "paused" {
				m.announce("sandbox %q is paused; resuming it\n", in.Name)
			}
			if err := m.admit(ctx, in.Config, in.Name, func(ctx context.Context) error { return m.wake(ctx, sb) }); err != nil {
				return nil, err
			}
			sb.Status = "running"
		}
		return res, nil
	}
	return nil, errs.Failure(fmt.Errorf("sandbox %q (container %s) kept changing while sbx tried to ensure it", in.Name, name), "another process is creating and removing it; try again")
}

// createLocked is create under sandbox in's create lock, so that two sbx making the same
// sandbox at once do not undo each other's parts (measured: one removed the egress proxy and
// network the other's start then missed). It returns errNameTaken when the sandbox appeared
// while it waited for the lock. Without a state directory it is create alone.
func (m *Manager) createLocked(ctx context.Context, in SpecInput) (*Sandbox, error) {
	if m.State == nil {
		return m.create(ctx, in)
	}
	path := m.State.createLockPath(in.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, errs.Failure(fmt.Errorf("sandbox %q: making its lock directory: %w", in.Name, err), "")
	}
	lock, err := flock.Open(ctx, path, true, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errs.Failure(fmt.Errorf("sandbox %q: taking its create lock: %w", in.Name, err), "")
	}
	defer lock.Close()
	if _, err := m.Inspect(ctx, in.Name); !IsNotFound(err) {
		return nil, errNameTaken
	}
	return m.create(ctx, in)
}

// Running returns sandbox name when it runs, for the commands that look at what runs inside
// one (ps, logs, kill): it never creates or starts one, but resumes a paused one (within
// maxRunning, by cfg), whose processes are still there. One that exists but does not run is
// a *NotRunningError. The sandbox is leased until the caller releases the lease.
func (m *Manager) Running(ctx context.Context, name string, cfg config.Config) (*Sandbox, *Lease, error) {
	lease, err := m.leaseForUse(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	sb, err := m.Inspect(ctx, name)
	if err == nil && sb.Status == "paused" {
		m.announce("sandbox %q is paused; resuming it\n", name)
		if _, err = m.Resume(ctx, name, cfg); err == nil {
			sb.Status = "running"
		}
	}
	switch {
	case err != nil:
		lease.Release()
		return nil, nil, err
	case sb.Status != "running":
		lease.Release()
		return nil, nil, &NotRunningError{Name: name, Status: sb.Status}
	}
	return sb, lease, nil
}

// NotRunningError is a sandbox that exists but does not run, so nothing runs inside it.
type NotRunningError struct{ Name, Status string }

func (e *NotRunningError) Error() string {
	return fmt.Sprintf("sandbox %q is not running (%s); its processes ended when it stopped", e.Name, e.Status)
}

// ExitCode is 1: nothing failed, there is just nothing there.
func (e *NotRunningError) ExitCode() int { return errs.CodeError }

// recreateIdle decides whether Ensure recreates sb, which is not current, on its own, and
// says so when it does.
func (m *Manager) recreateIdle(sb *Sandbox, keys []string, opts EnsureOptions) bool {
	// A sandbox that publishes ports was made by a command (sbx browser) that hands out
	// one-off secrets; recreating it behind the user's back would break them.
	if !opts.RecreateIfIdle || len(sb.PublishedPorts()) > 0 || (opts.KeepRunning && sb.Status == "running") {
		return false
	}
	idle := m.idleFor(sb)
	if idle < IdleRecreate {
		return false
	}
	m.announce("sandbox %q: configuration changed (%s) and it was idle for %s; recreating it\n", sb.Name, strings.Join(keys, ", "), idle.Round(time.Second))
	return true
}

// expiry bounds a wait: expired turns true d from now, without reading the clock here;
// stop frees its timer.
func expiry(d time.Duration) (expired func() bool, stop func()) {
	wait, cancel := context.WithTimeout(context.Background(), d)
	return func() bool { return wait.Err() != nil }, cancel
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (m *Manager) announce(format string, a ...any) {
	if m.Progress != nil {
		fmt.Fprintf(m.Progress, format, a...)
	}
}

func (m *Manager) idleFor(sb *Sandbox) time.Duration {
	last, ok := m.State.LastUsed(sb.Name)
	if !ok {
		last = sb.CreatedAt
	}
	return m.Now().Sub(last)
}

func (m *Manager) create(ctx context.Context, in SpecInput) (*Sandbox, error) {
	if err := m.checkIsolation(ctx, in.Config); err != nil {
		return nil, err
	}
	if err := m.checkLimits(ctx, in.Name, in.Config); err != nil {
		return nil, err
	}
	if err := m.checkEngineSupport(ctx, in.Name, in.Config); err != nil {
		return nil, err
	}
	in.Carried = m.carries(in.Config.Workspace)
	// Before anything slow (an image build): a project that cannot be protected is refused.
	plan, err := m.protection(in)
	if err != nil {
		return nil, err
	}
	if plan != nil {
		in.Protected = plan.Mounts
	}
	if err := m.overlayPossible(in); err != nil {
		return nil, err
	}
	img, err := m.Engine.ImageInspect(ctx, in.Config.Image)
	if cerrdefs.IsNotFound(err) && m.BuildImage != nil {
		if err := m.BuildImage(ctx, in.Config.Image); err != nil {
			return nil, err
		}
		img, err = m.Engine.ImageInspect(ctx, in.Config.Image)
	}
	if cerrdefs.IsNotFound(err) {
		return nil, errs.Failure(fmt.Errorf("image %s not found", in.Config.Image),
			"build the bundled images with \"sbx image build\", or set image: to one present on the engine")
	}
	if err != nil {
		return nil, errs.Engine(fmt.Sprintf("inspecting image %s", in.Config.Image), err)
	}
	if !in.Config.Setup.Empty() {
		if in.RunImage, err = m.derive(ctx, in, img); err != nil {
			return nil, err
		}
		if img, err = m.Engine.ImageInspect(ctx, in.RunImage); err != nil {
			return nil, errs.Engine(fmt.Sprintf("inspecting image %s", in.RunImage), err)
		}
	}
	if img.Config != nil {
		for v := range img.Config.Volumes {
			in.ImageVolumes = append(in.ImageVolumes, v)
		}
		in.ImageLabels = img.Config.Labels
	}
	in.CreatedAt = m.Now()
	in.AgentDir = m.agentDir(in.Name, in.Config)
	if in.ToolboxDir, err = m.toolboxDir(ctx, in.Name, in.Config); err != nil {
		return nil, err
	}
	if in.AgentDir != "" {
		in.AgentBinary = m.AgentBinary
	}
	if in.Config.Workspace == config.WorkspaceOverlay {
		in.OverlayDir = m.State.DirIn(AreaOverlay, in.Name)
	}
	if in.CADir, err = m.caDirFor(in); err != nil {
		return nil, err
	}
	if len(in.Config.Egress) > 0 {
		if err = m.createEgress(ctx, &in); err != nil {
			_ = m.removeEgress(context.WithoutCancel(ctx), in.Name, false)
			return nil, err
		}
	}
	spec, err := m.buildSpec(ctx, in)
	if err != nil {
		return nil, err
	}
	if err := prepareAgentDir(in.Name, in.AgentDir, agentOwnsSocket(in.Config.Isolation)); err != nil {
		return nil, err
	}
	caLock, err := m.prepareCADir(ctx, in)
	if err != nil {
		return nil, err
	}
	if caLock != nil {
		defer caLock.Close()
	}
	if err := m.prepareOverlay(ctx, in); err != nil {
		return nil, err
	}
	if plan != nil {
		if err := plan.Prepare(); err != nil {
			return nil, err
		}
	}
	if n := spec.NetworkSpec(); n != nil {
		if err := m.ensureNetwork(ctx, in.Name, n); err != nil {
			return nil, err
		}
	}
	if vol := spec.VolumeSpec(); vol != nil {
		// Creating a named volume that exists returns it, so racing callers agree.
		if _, err := m.Engine.VolumeCreate(ctx, *vol); err != nil {
			return nil, errs.Engine(fmt.Sprintf("creating workspace volume %s", vol.Name), err)
		}
		if err := m.claimOverlayVolume(ctx, in, vol.Name); err != nil {
			return nil, err
		}
	}
	resp, err := m.Engine.ContainerCreate(ctx, spec.Container, spec.Host, spec.Network, nil, spec.ContainerName)
	if engine.RefusedMount(err, in.AgentDir) {
		// The engine cannot see our directory (a socket forwarded from another machine, a
		// confined engine): the sandbox goes without the agent.
		_ = m.State.remove(in.AgentDir)
		in.AgentDir = ""
		if spec, err = m.buildSpec(ctx, in); err != nil {
			return nil, err
		}
		resp, err = m.Engine.ContainerCreate(ctx, spec.Container, spec.Host, spec.Network, nil, spec.ContainerName)
	}
	if engine.RefusedMount(err, in.ToolboxDir) {
		// As for the agent: the sandbox goes without the toolbox, as sandboxes did before it.
		in.ToolboxDir = ""
		if spec, err = m.buildSpec(ctx, in); err != nil {
			return nil, err
		}
		resp, err = m.Engine.ContainerCreate(ctx, spec.Container, spec.Host, spec.Network, nil, spec.ContainerName)
	}
	if cerrdefs.IsConflict(err) {
		return nil, err
	}
	if err == nil {
		if lerr := m.verifyLimits(ctx, in.Name, resp.ID, spec.Host, in.Config); lerr != nil {
			_ = m.removeContainer(context.WithoutCancel(ctx), &Sandbox{Name: in.Name, ID: resp.ID}, false)
			if in.CADir != "" {
				_ = m.State.remove(in.CADir)
			}
			if len(in.Config.Egress) > 0 {
				_ = m.removeEgress(context.WithoutCancel(ctx), in.Name, false)
			}
			return nil, lerr
		}
	}
	var bundleErr error
	if err == nil && in.CADir != "" {
		if bundleErr = m.writeCABundle(ctx, resp.ID, in); bundleErr != nil {
			_ = m.removeContainer(context.WithoutCancel(ctx), &Sandbox{Name: in.Name, ID: resp.ID}, false)
		}
	}
	if (err != nil || bundleErr != nil) && in.CADir != "" {
		// Ours alone: another create of this name waits for its lock, then finds the name taken.
		_ = m.State.remove(in.CADir)
	}
	switch {
	case bundleErr != nil:
		return nil, bundleErr
	case engine.RefusedMount(err, in.CADir):
		return nil, errs.Failure(fmt.Errorf("creating sandbox %q: the engine cannot mount %s, which holds its CA bundle: %w", in.Name, in.CADir, err),
			"caCerts needs an engine that sees this machine's files; leave it out for this engine")
	case err != nil:
		if len(in.Config.Egress) > 0 {
			_ = m.removeEgress(context.WithoutCancel(ctx), in.Name, false)
		}
		return nil, errs.Engine(fmt.Sprintf("creating sandbox %q", in.Name), err)
	}
	m.announce("created sandbox %q (%s)\n", in.Name, spec.Container.Image)
	return &Sandbox{Name: in.Name, Key: in.Name, ID: resp.ID, Status: "created", Labels: spec.Container.Labels, Image: spec.Container.Image, CreatedAt: in.CreatedAt}, nil
}

// buildSpec is BuildSpec for this Manager's engine (engineSecurityOpts, engineUserSpec).
func (m *Manager) buildSpec(ctx context.Context, in SpecInput) (*Spec, error) {
	spec, err := BuildSpec(in)
	if err != nil {
		return nil, err
	}
	if err := m.engineSecurityOpts(ctx, spec.Host); err != nil {
		return nil, err
	}
	if err := m.engineUserSpec(ctx, spec, in.Config); err != nil {
		return nil, err
	}
	return spec, nil
}

// protection plans the protected paths of in's sandbox, nil unless its workspace is rw, and
// passes on the plan's warnings.
func (m *Manager) protection(in SpecInput) (*protect.Plan, error) {
	// A carried workspace binds nothing of the host: its changes come back only through apply,
	// which skips protected paths.
	if in.Config.Workspace != config.WorkspaceRW || in.Carried {
		return nil, nil
	}
	find := m.Protect
	if find == nil {
		find = func(root string, cfg config.Config) (*protect.Plan, error) { return Protection(root, m.HomeDir, cfg) }
	}
	plan, err := find(in.ProjectRoot, in.Config)
	if err != nil {
		return nil, fmt.Errorf("creating sandbox %q with a rw workspace: %w", in.Name, err)
	}
	if plan != nil && m.Warn != nil {
		for _, w := range plan.Warnings {
			fmt.Fprintf(m.Warn, "warning: sandbox %q: %s\n", in.Name, w)
		}
	}
	return plan, nil
}

// Protection lists what a rw workspace of the project at root mounts apart (protect.Find on
// cfg.ProtectedPaths): protected paths read-only, the directories on the way pinned. home is
// the user's home directory ("" when unknown), for git config paths written ~/. It only
// reads the project, so "sbx explain" may call it; the plan is nil for other workspace modes.
func Protection(root, home string, cfg config.Config) (*protect.Plan, error) {
	if cfg.Workspace != config.WorkspaceRW {
		return nil, nil
	}
	return protect.Find(root, cfg.ProtectedPaths, protect.Options{Home: home})
}

// start starts sb and, when it has this sbx's agent, hands the agent its socket. A sandbox
// with egress rules starts after its proxy listens.
func (m *Manager) start(ctx context.Context, sb *Sandbox) error {
	if sb.hasEgress() {
		if err := m.startProxy(ctx, sb.Name); err != nil {
			return err
		}
	}
	as, err := m.startContainer(ctx, sb)
	if err != nil {
		return err
	}
	if m.finishAgent(ctx, as) {
		return m.checkCgroupLimits(ctx, sb, as.host)
	}
	return nil
}

func (m *Manager) engineStart(ctx context.Context, sb *Sandbox) error {
	if err := m.Engine.ContainerStart(ctx, sb.ID, container.StartOptions{}); err != nil {
		if engine.IsMissingBindSource(err) {
			// A protected path (or a bind) removed on the host since create: the engine
			// mounts the same paths at every start.
			return errs.Failure(fmt.Errorf("starting sandbox %q: %w", sb.Name, err),
				fmt.Sprintf("a path it mounts is gone from the host; recreate it with: sbx create -n %s --replace", sb.Name))
		}
		return errs.Engine(fmt.Sprintf("starting sandbox %q", sb.Name), err)
	}
	return nil
}

// Inspect returns sandbox name, or an error satisfying IsNotFound.
func (m *Manager) Inspect(ctx context.Context, name string) (*Sandbox, error) {
	info, err := m.Engine.ContainerInspect(ctx, ContainerName(name))
	if cerrdefs.IsNotFound(err) {
		return nil, &NotFoundError{Name: name}
	}
	if err != nil {
		return nil, errs.Engine(fmt.Sprintf("inspecting sandbox %q", name), err)
	}
	// Containers inherit our images' labels, so dev.sbx.managed alone does not prove sbx made
	// it: the name label must match too, or for one made for the pool, the claim record.
	if info.Config == nil || info.Config.Labels[LabelManaged] != "true" {
		return nil, &NotManagedError{Container: ContainerName(name)}
	}
	labelName := info.Config.Labels[LabelName]
	sb := &Sandbox{Name: name, Key: name, ID: info.ID, Labels: info.Config.Labels, Image: engine.NormalizeImage(info.Config.Image)}
	claimed := time.Time{}
	switch {
	case info.Config.Labels[LabelPool] == "" && labelName == name:
	case info.Config.Labels[LabelPool] == "":
		return nil, &NotManagedError{Container: ContainerName(name)}
	default:
		rec, ok := m.State.claimOf(name)
		if !ok || rec.ID != info.ID || rec.Pooled != labelName {
			if labelName == name {
				return nil, &PoolError{Name: name}
			}
			return nil, &NotManagedError{Container: ContainerName(name)}
		}
		sb.Key, claimed = labelName, rec.ClaimedAt
	}
	for _, mp := range info.Mounts {
		if mp.Type == mount.TypeBind && mp.RW && filepath.IsAbs(mp.Source) {
			sb.WritableHostPaths = append(sb.WritableHostPaths, mp.Source)
		}
	}
	if info.State != nil {
		sb.Status = string(info.State.Status)
	}
	sb.CreatedAt, _ = time.Parse(time.RFC3339, info.Config.Labels[LabelCreatedAt])
	if !claimed.IsZero() {
		sb.CreatedAt = claimed
	}
	return sb, nil
}

// List returns every sbx-managed sandbox the engine knows.
func (m *Manager) List(ctx context.Context) ([]*Sandbox, error) {
	list, err := m.Engine.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelManaged+"=true"))})
	if err != nil {
		return nil, errs.Engine("listing sandboxes", err)
	}
	out := make([]*Sandbox, 0, len(list))
	for _, c := range list {
		name, key := c.Labels[LabelName], c.Labels[LabelName]
		var claimed time.Time
		if c.Labels[LabelPool] != "" {
			// Made for the pool: a sandbox only once claimed, under the name its record gives.
			var ok bool
			if name, claimed, ok = m.claimedAs(c); !ok {
				continue
			}
		}
		if config.ValidName(name) != nil || c.Labels[LabelManaged] != "true" || !slices.Contains(c.Names, "/"+ContainerName(name)) {
			continue // not one of ours, though it may carry our images' labels
		}
		sb := &Sandbox{Name: name, Key: key, ID: c.ID, Status: string(c.State), Labels: c.Labels, Image: engine.NormalizeImage(c.Image)}
		for _, p := range c.Ports {
			if p.PublicPort != 0 {
				sb.Ports = append(sb.Ports, fmt.Sprintf("%s:%d->%d/%s", p.IP, p.PublicPort, p.PrivatePort, p.Type))
			}
		}
		sb.CreatedAt, _ = time.Parse(time.RFC3339, c.Labels[LabelCreatedAt])
		if !claimed.IsZero() {
			sb.CreatedAt = claimed
		}
		if sb.CreatedAt.IsZero() {
			sb.CreatedAt = time.Unix(c.Created, 0)
		}
		out = append(out, sb)
	}
	return out, nil
}

// Stop stops sandbox name; its files in tmpfs are lost, its workspace volume kept.
func (m *Manager) Stop(ctx context.Context, name string) error {
	sb, err := m.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if err := m.Engine.ContainerStop(ctx, sb.ID, container.StopOptions{}); err != nil {
		return errs.Engine(fmt.Sprintf("stopping sandbox %q", name), err)
	}
	if sb.hasEgress() {
		return m.stopProxy(ctx, name)
	}
	return nil
}

// Remove deletes sandbox name: its container, private workspace volume and state file. A
// running sandbox needs force.
func (m *Manager) Remove(ctx context.Context, name string, force bool) error {
	sb, err := m.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if sb.Status == "running" && !force {
		return errs.Failure(fmt.Errorf("sandbox %q is running", name), fmt.Sprintf("stop it first (sbx stop %s) or use rm -f", name))
	}
	return m.removeContainer(ctx, sb, true)
}

// removeContainer removes the container; with forget it also drops the private workspace
// volume and the state file (a recreate keeps both, so no workspace data is lost).
func (m *Manager) removeContainer(ctx context.Context, sb *Sandbox, forget bool) error {
	err := m.Engine.ContainerRemove(ctx, sb.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return errs.Engine(fmt.Sprintf("removing sandbox %q", sb.Name), err)
	}
	if sb.hasEgress() {
		if err := m.removeEgress(ctx, sb.Name, forget); err != nil {
			return err
		}
	}
	if !forget {
		return nil
	}
	if sb.Labels[LabelWorkspace] == "none" || sb.Labels[LabelCarry] != "" {
		if err := m.Engine.VolumeRemove(ctx, VolumeName(sb.key()), true); err != nil && !cerrdefs.IsNotFound(err) {
			return errs.Engine(fmt.Sprintf("removing workspace volume of %q", sb.Name), err)
		}
	}
	if sb.Labels[LabelWorkspace] == config.WorkspaceOverlay {
		if err := m.removeOverlay(ctx, sb.Name); err != nil {
			return err
		}
	}
	if sb.Labels[LabelCarry] != "" {
		if err := m.State.remove(m.State.DirIn(AreaOverlay, sb.Name)); err != nil {
			return fmt.Errorf("sandbox %q was removed, but not the record of its carried workspace: %w", sb.Name, err)
		}
	}
	if sb.hasOwnNetwork() {
		if err := m.removeNetwork(ctx, sb.key()); err != nil {
			return err
		}
	}
	if sb.key() != sb.Name {
		if err := m.forgetState(sb.key(), m.agentDirOf(sb) != ""); err != nil {
			return err
		}
		return m.forgetState(sb.Name, false)
	}
	return m.forgetState(sb.Name, m.agentDirOf(sb) != "")
}

// forgetState removes sandbox name's state file, lease and claim record, with agent its agent
// directory, and its CA directory.
func (m *Manager) forgetState(name string, agent bool) error {
	if err := m.State.Remove(name); err != nil {
		return err
	}
	_ = m.State.remove(m.State.claimPath(name))
	_ = m.State.remove(m.State.startedPath(name))
	if agent {
		_ = m.State.remove(m.State.LockIn(AreaAgent, name))
		if err := m.State.remove(m.State.DirIn(AreaAgent, name)); err != nil {
			return errs.Failure(fmt.Errorf("sandbox %q was removed, but not its agent directory: %w", name, err),
				"sbx removes nothing outside its state directory; look at that path, and remove it yourself if it should go (as root if another user owns what is in it)")
		}
	}
	// Its path follows from the name alone, so it goes whatever the labels say.
	_ = m.State.remove(m.State.LockIn(AreaCA, name))
	if err := m.State.remove(m.State.DirIn(AreaCA, name)); err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q was removed, but not its CA directory: %w", name, err),
			"sbx removes nothing outside its state directory; look at that path, and remove it yourself if it should go")
	}
	return nil
}

// NotFoundError is a sandbox that does not exist.
type NotFoundError struct{ Name string }

func (e *NotFoundError) Error() string { return fmt.Sprintf("sandbox %q not found", e.Name) }
func (e *NotFoundError) Hint() string  { return "list sandboxes with \"sbx ls\"" }

// IsNotFound reports whether err says a sandbox does not exist.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}
