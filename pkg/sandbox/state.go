package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/hostfs"
)

// StateStore keeps each sandbox's last use as the modification time of its own small file.
// Everything else about a sandbox lives in the engine's labels, so losing this directory loses
// only idle times.
type StateStore struct {
	Dir string
	Now func() time.Time
}

// stateFile is a state file's content, written when the file is made. Files written before
// last use became the file's time also hold lastUsed, the same time as theirs.
type stateFile struct {
	Name string `json:"name"`
}

func (s *StateStore) path(name string) string { return filepath.Join(s.Dir, name+".json") }

// leasePath is the lock file of sandbox name's leases (see admission.go).
func (s *StateStore) leasePath(name string) string { return filepath.Join(s.Dir, leaseDir, name) }

// IdleLockPath is the lock that tells sandbox name's agent an sbx is using the sandbox, so it
// must not stop it for idleness (admission.go, idle.go): beside the leases, under a name no
// sandbox can have, and linked into the agent's directory when the sandbox starts.
func (s *StateStore) IdleLockPath(name string) string {
	return filepath.Join(s.Dir, leaseDir, "."+name+".idle")
}

// createLockPath is the lock held while sandbox name is made (createLocked), beside its idle lock.
func (s *StateStore) createLockPath(name string) string {
	return filepath.Join(s.Dir, leaseDir, "."+name+".create")
}

// An Area is a directory of the state directory with one directory for each sandbox, computed
// from its name every time, never read from a label, which an image can set; beside it is
// the sandbox's lock for it, out of every sandbox's reach, under a name no sandbox can have.
type Area string

// The areas, and what their locks are held for.
const (
	// AreaAgent holds the agent's sockets (agent.go); its lock is held while the sandbox
	// starts with its agent.
	AreaAgent Area = "agent"
	// AreaCA holds the CA bundle (cacerts.go); its lock is held while the bundle is written,
	// and taken shared before the sandbox starts, so no start comes between its create and
	// its bundle.
	AreaCA Area = "ca"
	// AreaEgress holds the proxy's rules, log and socket (egress.go); its lock is held while
	// the rules are rewritten (ChangeEgress).
	AreaEgress Area = "egress"
	// AreaOverlay holds the overlay layers (overlay.go) or a carried workspace's copy
	// (carry.go); its lock is held while they are made or changed.
	AreaOverlay Area = "overlay"
)

// DirIn is sandbox name's directory in area a.
func (s *StateStore) DirIn(a Area, name string) string { return filepath.Join(s.Dir, string(a), name) }

// LockIn is sandbox name's lock for area a; prune takes it too, before it removes a
// directory left there.
func (s *StateStore) LockIn(a Area, name string) string {
	return filepath.Join(s.Dir, string(a), "."+name+".lock")
}

// toolboxDir is the directory of the toolbox whose Dockerfile has hash (toolbox.go), shared by
// every sandbox that mounts it.
func (s *StateStore) toolboxDir(hash string) string { return filepath.Join(s.Dir, "toolbox", hash) }

// namesIn lists the sandboxes that have a directory in area a: directories, not links, under
// names sbx could have given.
func (s *StateStore) namesIn(a Area) ([]string, error) {
	return s.entryNames(string(a), string(a)+" directories", func(e fs.DirEntry) bool { return e.IsDir() && config.ValidName(e.Name()) == nil })
}

// entryNames lists the entries of directory sub of the state directory ("" for the directory
// itself) that keep accepts; a missing directory has none. what names it in an error.
func (s *StateStore) entryNames(sub, what string, keep func(fs.DirEntry) bool) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.Dir, sub))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	var names []string
	for _, e := range entries {
		if keep(e) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// isRecord accepts a record file: a regular file named as a sandbox whose name has prefix.
func isRecord(prefix string) func(fs.DirEntry) bool {
	return func(e fs.DirEntry) bool {
		return strings.HasPrefix(e.Name(), prefix) && config.ValidName(e.Name()) == nil && e.Type().IsRegular()
	}
}

// inside returns p with its links resolved when it lies strictly inside the state directory
// (its links resolved too), and an error otherwise. Whatever sbx removes on the host passes
// through it, so no label, name or planted link can make it remove anything else.
func (s *StateStore) inside(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(s.Dir)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, real)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("refusing to remove %s: it resolves to %s, which is not inside sbx's state directory %s", p, real, dir)
	}
	return real, nil
}

// remove deletes p, with everything under it, when inside allows it, whatever modes a
// sandbox gave what it wrote there (hostfs.RemoveTree). A missing p is not an error.
func (s *StateStore) remove(p string) error {
	real, err := s.inside(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return hostfs.RemoveTree(real, false)
}

// empty deletes everything in the directory p, as remove does, and keeps p.
func (s *StateStore) empty(p string) error {
	real, err := s.inside(p)
	if err != nil {
		return err
	}
	return hostfs.RemoveTree(real, true)
}

// Touch records that sandbox name was used now.
func (s *StateStore) Touch(name string) error { return s.SetLastUsed(name, s.Now()) }

// SetLastUsed records t as the last use of sandbox name: one call that sets its state file's
// time (a warm exec records its use before and after the command), the file made first,
// atomically (temp file + rename), when there is none.
func (s *StateStore) SetLastUsed(name string, t time.Time) error {
	err := os.Chtimes(s.path(name), t, t)
	if errors.Is(err, fs.ErrNotExist) {
		if err = s.create(name); err == nil {
			err = os.Chtimes(s.path(name), t, t)
		}
	}
	if err != nil {
		return fmt.Errorf("recording last use of %q: %w", name, err)
	}
	return nil
}

// create writes sandbox name's state file.
func (s *StateStore) create(name string) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(stateFile{Name: name})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.Dir, "."+name+".*.tmp")
	if err != nil {
		return err
	}
	defer func() { _ = s.remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.path(name))
}

// LastUsed returns when sandbox name was last used, if known.
func (s *StateStore) LastUsed(name string) (time.Time, bool) {
	fi, err := os.Stat(s.path(name))
	if err != nil || !fi.Mode().IsRegular() {
		return time.Time{}, false
	}
	return fi.ModTime().UTC(), true
}

// Remove forgets sandbox name, with its lease file. A missing file is not an error.
func (s *StateStore) Remove(name string) error {
	// The name may come from a label: only a valid one stays a single path element.
	if err := config.ValidName(name); err != nil {
		return fmt.Errorf("removing state: %w", err)
	}
	_ = s.remove(s.leasePath(name))
	_ = s.remove(s.IdleLockPath(name))
	_ = s.remove(s.createLockPath(name))
	if err := s.remove(s.path(name)); err != nil {
		return fmt.Errorf("removing state of %q: %w", name, err)
	}
	return nil
}

// Names lists the sandboxes that have a state file.
func (s *StateStore) Names() ([]string, error) {
	files, err := s.entryNames("", "state dir", func(e fs.DirEntry) bool {
		n, ok := strings.CutSuffix(e.Name(), ".json")
		return ok && config.ValidName(n) == nil
	})
	for i, f := range files {
		files[i] = strings.TrimSuffix(f, ".json")
	}
	return files, err
}
