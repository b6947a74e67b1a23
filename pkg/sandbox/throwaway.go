package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// throwawayDir holds one record per throwaway sandbox (exec/run/mcp --rm): an empty file
// named after the sandbox, locked by the sbx that owns it for as long as it runs. The kernel
// drops the lock when that sbx dies, however it dies, so an unlocked record is a sandbox
// left behind: SweepThrowaways finds them with one directory read and a lock attempt each.
const throwawayDir = "throwaway"

// ThrowawayPrefix begins every throwaway sandbox's name.
const ThrowawayPrefix = "tmp-"

// Throwaway is a claimed throwaway sandbox name; its record stays locked until Remove.
type Throwaway struct {
	Name string
	path string
	lock *os.File
}

// ClaimThrowaway picks a fresh name for a throwaway sandbox and records it, locked, before
// anything is created under it, so a killed sbx always leaves a record of what it made. The
// record appears already locked (made under a temporary name, then linked into place), so a
// sweep can never take it for an abandoned one.
func (s *StateStore) ClaimThrowaway() (*Throwaway, error) {
	dir := filepath.Join(s.Dir, throwawayDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recording a throwaway sandbox: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".claim-*")
	if err != nil {
		return nil, fmt.Errorf("recording a throwaway sandbox: %w", err)
	}
	defer os.Remove(tmp.Name())
	tmp.Close()
	lock, err := flock.Open(context.Background(), tmp.Name(), true, false)
	if err != nil {
		return nil, fmt.Errorf("recording a throwaway sandbox: %w", err)
	}
	for range 5 {
		var b [5]byte
		_, _ = rand.Read(b[:])
		name := ThrowawayPrefix + hex.EncodeToString(b[:])
		path := filepath.Join(dir, name)
		if _, err := os.Lstat(s.path(name)); err == nil {
			continue // a sandbox of that name has state: never reuse it
		}
		err := os.Link(tmp.Name(), path)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("recording a throwaway sandbox: %w", err)
		}
		return &Throwaway{Name: name, path: path, lock: lock}, nil
	}
	lock.Close()
	return nil, errors.New("recording a throwaway sandbox: no free name after 5 tries")
}

// RemoveThrowaway removes t's sandbox, whatever state it reached (none, half created,
// running), and then its record. On failure the record stays, unlocked once this sbx exits,
// so the next sweep tries again.
func (m *Manager) RemoveThrowaway(ctx context.Context, t *Throwaway) error {
	if err := m.removeRemains(ctx, t.Name); err != nil {
		t.lock.Close()
		return err
	}
	return t.Drop()
}

// Drop removes t's record and lets go of it: for a claim nothing was created under, or
// once its sandbox is gone.
func (t *Throwaway) Drop() error {
	defer t.lock.Close()
	if err := os.Remove(t.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the record of throwaway sandbox %q: %w", t.Name, err)
	}
	return nil
}

// SweepThrowaways removes the throwaway sandboxes whose sbx died before removing them
// (killed with SIGKILL, or the machine stopped) and returns their names. Without a record
// it costs one directory read; with some, one lock attempt each, and engine calls only for
// the abandoned ones.
func (m *Manager) SweepThrowaways(ctx context.Context) ([]string, error) {
	if m.State == nil || !flock.Excludes {
		return nil, nil
	}
	paths, err := m.State.throwawayRecords()
	if err != nil {
		return nil, err
	}
	var removed []string
	var first error
	for _, path := range paths {
		name := filepath.Base(path)
		lock, err := flock.Open(ctx, path, true, false)
		if err != nil {
			continue // its sbx still runs (flock.ErrLocked), or the record just went
		}
		t := &Throwaway{Name: name, path: path, lock: lock}
		if !sameFile(lock, path) {
			lock.Close() // removed and recreated since the read: not the one we looked at
			continue
		}
		if err := m.RemoveThrowaway(ctx, t); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		removed = append(removed, name)
	}
	return removed, first
}

// throwawayRecords are the paths of the throwaway records in the state directory: the one
// rule for what counts as one, for the sweep and for the warm path's check alike.
func (s *StateStore) throwawayRecords() ([]string, error) {
	names, err := s.entryNames(throwawayDir, "throwaway records", isRecord(ThrowawayPrefix))
	for i, n := range names {
		names[i] = filepath.Join(s.Dir, throwawayDir, n)
	}
	return names, err
}

// leftThrowaway says whether a throwaway sandbox's record is not held by its sbx: one left
// by an sbx that did not finish, which the next command that reaches the engine removes
// (SweepThrowaways). A directory it cannot read counts as one, so the warm path gives way.
func (s *StateStore) leftThrowaway() bool {
	if !flock.Excludes {
		return false
	}
	paths, err := s.throwawayRecords()
	if err != nil {
		return true
	}
	return slices.ContainsFunc(paths, flock.Unheld)
}

// sameFile reports whether the open file f is still what path names.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(path)
	return err == nil && os.SameFile(a, b)
}

// removeRemains removes sandbox name with everything sbx made for it. Its container may be
// gone or never made (sbx killed halfway through a create), so what follows from the name
// alone is removed too: the networks, volumes and overlay layers sbx names after it
// (networks only when their labels say they are this sandbox's) and its state.
func (m *Manager) removeRemains(ctx context.Context, name string) error {
	sb, err := m.Inspect(ctx, name)
	var nf *NotFoundError
	switch {
	case err == nil:
		return m.removeContainer(ctx, sb, true)
	case !errors.As(err, &nf):
		return err
	}
	return m.removeLeftovers(ctx, name)
}

// removeLeftovers removes what sbx names after sandbox name, whose container is gone: its
// networks, volumes, overlay layers and state.
func (m *Manager) removeLeftovers(ctx context.Context, name string) error {
	if err := m.removeEgress(ctx, name, true); err != nil {
		return err
	}
	if err := m.removeNetwork(ctx, name); err != nil {
		return err
	}
	if err := m.Engine.VolumeRemove(ctx, VolumeName(name), true); err != nil && !cerrdefs.IsNotFound(err) {
		return errs.Engine(fmt.Sprintf("removing workspace volume of %q", name), err)
	}
	if err := m.removeOverlay(ctx, name); err != nil {
		return err
	}
	return m.forgetState(name, true)
}
