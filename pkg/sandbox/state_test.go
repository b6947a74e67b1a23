package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Whatever sbx removes on the host must lie strictly inside its state directory once links
// are resolved.
func TestInsideStateDir(t *testing.T) {
	root := t.TempDir()
	s := &StateStore{Dir: filepath.Join(root, "state")}
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(s.Dir, "agent", "web"), filepath.Join(root, "state2"), outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "web.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"agent/out":   outside,
		"agent/up":    "../..",
		"agent/state": s.Dir,
		"agent/in":    "web",
	} {
		if err := os.Symlink(target, filepath.Join(s.Dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	linkedDir := filepath.Join(root, "linked-state")
	if err := os.Symlink(s.Dir, linkedDir); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		store *StateStore
		path  string
		ok    bool
	}{
		{s, filepath.Join(s.Dir, "agent", "web"), true},
		{s, filepath.Join(s.Dir, "web.json"), true},
		{s, filepath.Join(s.Dir, "agent", "in"), true}, // a link that stays inside
		{&StateStore{Dir: linkedDir}, filepath.Join(linkedDir, "agent", "web"), true},
		{s, filepath.Join(linkedDir, "agent", "web"), true}, // the same place, reached through a link
		{s, s.Dir, false}, // the state directory itself
		{s, s.Dir + "/", false},
		{s, filepath.Join(s.Dir, "agent", ".."), false},
		{s, s.Dir + "/agent/../../outside", false},
		{s, filepath.Join(root, "state2"), false}, // a sibling sharing its prefix
		{s, outside, false},
		{s, filepath.Join(s.Dir, "agent", "out"), false}, // links pointing out
		{s, filepath.Join(s.Dir, "agent", "up"), false},
		{s, filepath.Join(s.Dir, "agent", "state"), false},
		{s, "/", false},
	} {
		_, err := tt.store.inside(tt.path)
		if (err == nil) != tt.ok {
			t.Errorf("inside(%s) with state dir %s: err %v, want ok %v", tt.path, tt.store.Dir, err, tt.ok)
		}
	}
	if _, err := s.inside(filepath.Join(s.Dir, "agent", "gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing path: %v", err)
	}

	// remove goes by the same rule, and a refusal removes nothing.
	if err := s.remove(filepath.Join(s.Dir, "agent", "out")); err == nil {
		t.Error("remove through a link pointing out was accepted")
	}
	if err := s.remove(s.Dir); err == nil {
		t.Error("remove of the state directory itself was accepted")
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a refused remove touched the target: %v", err)
	}
	if err := s.remove(filepath.Join(s.Dir, "agent", "gone")); err != nil {
		t.Errorf("removing a missing path: %v", err)
	}
	sealed := filepath.Join(s.Dir, "agent", "web")
	if err := os.WriteFile(filepath.Join(sealed, "agent.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sealAgentDir(sealed)
	if err := s.remove(sealed); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sealed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a sealed agent directory was not removed: %v", err)
	}
}
