package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// A sandbox's rules file at runtime: what "sbx egress allow|deny" changes, and what explain
// shows of it beside the config's rules.

// EgressLogPath is sandbox name's decision log, which its proxy writes.
func (s *StateStore) EgressLogPath(name string) string {
	return filepath.Join(s.DirIn(AreaEgress, name), EgressLogFile)
}

// ReadEgressRules reads sandbox name's rules file. The proxy, which handles the sandbox's
// traffic, may write in that directory, so the read is bounded and strict.
func (s *StateStore) ReadEgressRules(name string) (egress.File, error) {
	fh, err := os.Open(s.egressRules(name))
	if err != nil {
		return egress.File{}, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, egress.MaxFileSize+1))
	if err != nil {
		return egress.File{}, err
	}
	return egress.ParseFile(data)
}

// EgressRuntime is what "sbx egress allow|deny" changed of a sandbox's rules, beside the
// config it was created with.
type EgressRuntime struct {
	// Configured is the sandbox's egress list as its config had it at create.
	Configured []string `json:"configured"`
	// Allowed are destinations allowed at runtime; Denied those denied, which win.
	Allowed []string `json:"allowed"`
	Denied  []string `json:"denied"`
}

// EgressRuntimeOf splits a sandbox's rules file into its config's list and the runtime
// changes, given the list its config had.
func EgressRuntimeOf(f egress.File, configured []string) EgressRuntime {
	rt := EgressRuntime{Configured: configured, Allowed: []string{}, Denied: []string{}}
	for _, a := range f.Allow {
		if !slices.Contains(configured, a) {
			rt.Allowed = append(rt.Allowed, a)
		}
	}
	rt.Denied = append(rt.Denied, f.Deny...)
	return rt
}

// egressConfigured is the egress list sb was created with, from its config label.
func (s *Sandbox) egressConfigured() []string {
	var shape struct {
		Egress []string `json:"egress"`
	}
	s.fromShape(&shape)
	return shape.Egress
}

// ChangeEgress allows (allow) or denies destinations for the running proxy of sandbox
// name, by rewriting its rules file, which the proxy re-reads within half a second; the
// config stays as it is. Allowing a destination takes back an earlier deny of the same text;
// denying one takes back an earlier runtime allow, and a deny entry wins over the config's
// rules. It returns the sandbox's runtime changes as they are now.
func (m *Manager) ChangeEgress(ctx context.Context, name string, allow bool, dests []string) (EgressRuntime, error) {
	if _, err := egress.Expand(dests); err != nil {
		return EgressRuntime{}, errs.New(err, errs.CodeUsage, errs.Hint(err))
	}
	sb, err := m.Inspect(ctx, name)
	if err != nil {
		return EgressRuntime{}, err
	}
	if !sb.hasEgress() {
		return EgressRuntime{}, errs.New(fmt.Errorf("sandbox %q has no egress rules, so no proxy: its network setting alone decides what it reaches", name), errs.CodeError,
			fmt.Sprintf("set egress: (with network: none) in its config and recreate it: sbx create -n %s --replace", name))
	}
	lock, err := flock.Open(ctx, m.State.LockIn(AreaEgress, name), true, true)
	if err != nil {
		return EgressRuntime{}, errs.Failure(fmt.Errorf("sandbox %q: locking its egress rules: %w", name, err), "")
	}
	defer lock.Close()
	f, err := m.State.ReadEgressRules(name)
	if err != nil {
		return EgressRuntime{}, errs.Failure(fmt.Errorf("sandbox %q: reading its egress rules: %w", name, err),
			fmt.Sprintf("recreate it to write them again: sbx create -n %s --replace", name))
	}
	configured := sb.egressConfigured()
	for _, d := range dests {
		if allow {
			f.Deny = slices.DeleteFunc(f.Deny, func(s string) bool { return s == d })
			if !slices.Contains(f.Allow, d) {
				f.Allow = append(f.Allow, d)
			}
			continue
		}
		f.Allow = slices.DeleteFunc(f.Allow, func(s string) bool { return s == d && !slices.Contains(configured, s) })
		if !slices.Contains(f.Deny, d) {
			f.Deny = append(f.Deny, d)
		}
	}
	logPath := m.State.EgressLogPath(name)
	mark := egress.MarkLog(logPath)
	if err := egress.WriteFile(m.State.egressRules(name), f); err != nil {
		return EgressRuntime{}, errs.Failure(fmt.Errorf("sandbox %q: writing its egress rules: %w", name, err), "")
	}
	if info, err := m.Engine.ContainerInspect(ctx, ProxyName(name)); err == nil && info.State != nil && info.State.Running {
		if err := m.waitReload(ctx, name, logPath, mark); err != nil {
			return EgressRuntime{}, err
		}
	}
	return EgressRuntimeOf(f, configured), nil
}

// reloadWait bounds how long ChangeEgress waits for a running proxy to take the new rules:
// it checks the file every 500 ms.
const reloadWait = 5 * time.Second

// waitReload waits until the proxy logs a reload after mark (in whichever file rotation left it), so that when "sbx egress
// allow" returns, the change is in effect; a reload that refused the file is an error.
func (m *Manager) waitReload(ctx context.Context, name, logPath string, mark egress.LogMark) error {
	expired, stop := expiry(reloadWait)
	defer stop()
	for !expired() {
		e, ok := egress.FindSince(logPath, mark, func(e egress.Entry) bool { return e.Event == "reload" })
		switch {
		case ok && e.Error != "":
			return errs.Failure(fmt.Errorf("sandbox %q: its proxy refused the new rules and keeps the previous ones: %s", name, e.Error), "")
		case ok:
			return nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return m.proxyFailure(ctx, ProxyName(name), fmt.Errorf("sandbox %q: its proxy did not take the new rules within %s (the rules file is written)", name, reloadWait))
}

// EgressRuntime returns the runtime changes of sandbox name's rules; ok is false when it
// has no rules file (no egress, or not created on this machine).
func (m *Manager) EgressRuntime(ctx context.Context, name string) (rt EgressRuntime, ok bool, err error) {
	sb, err := m.Inspect(ctx, name)
	if err != nil || !sb.hasEgress() {
		return rt, false, err
	}
	f, err := m.State.ReadEgressRules(name)
	if errors.Is(err, os.ErrNotExist) {
		return rt, false, nil
	}
	if err != nil {
		return rt, false, fmt.Errorf("sandbox %q: reading its egress rules: %w", name, err)
	}
	return EgressRuntimeOf(f, sb.egressConfigured()), true, nil
}
