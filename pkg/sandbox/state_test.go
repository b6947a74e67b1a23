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
	if err := os.Chmod(sealed, 0o555); err != nil { // as an older sbx sealed it
		t.Fatal(err)
	}
	if err := s.remove(sealed); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sealed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a sealed agent directory was not removed: %v", err)
	}
}

// What a sandbox of an older sbx could leave in its agent directory (a directory it could
// write to) is removed whatever its modes, links in it are removed and never followed, and
// empty keeps the directory itself.
func TestRemoveTreeLeftByASandbox(t *testing.T) {
	root := t.TempDir()
	s := &StateStore{Dir: filepath.Join(root, "state")}
	outside := filepath.Join(root, "outside")
	if err := os.MkdirAll(filepath.Join(outside, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "sub", "keep"), []byte("host file"), 0o444); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.Dir, "agent", "web")
	plantTree(t, dir, outside)
	if err := s.empty(dir); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("after empty: %v %v", entries, err)
	}
	plantTree(t, dir, outside)
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := s.remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the directory is left: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(outside, "sub", "keep")); err != nil || string(data) != "host file" {
		t.Errorf("a file a link pointed at: %q %v", data, err)
	}
	if fi, err := os.Stat(filepath.Join(outside, "sub")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("a directory a link pointed at changed: %v %v", fi, err)
	}
}

// plantTree fills dir as a sandbox could have: files in directories of mode 0555 and 0000,
// nested, and links to a directory and a file outside.
func plantTree(t *testing.T, dir, outside string) {
	t.Helper()
	for _, d := range []string{"ro/deeper", "none/inner", "open"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "data"), make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"out": outside, "ro/deeper/out": filepath.Join(outside, "sub"), "file": filepath.Join(outside, "sub", "keep")} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for d, mode := range map[string]os.FileMode{"ro/deeper": 0o555, "ro": 0o555, "none/inner": 0o000, "none": 0o000} {
		if err := os.Chmod(filepath.Join(dir, d), mode); err != nil {
			t.Fatal(err)
		}
	}
}
