package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// owners fakes who owns what: paths not listed belong to me (uid 1000) with their real mode.
type owners map[string]Ownership

func (o owners) of(path string) (Ownership, error) {
	if own, ok := o[path]; ok {
		return own, nil
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return Ownership{}, err
	}
	return Ownership{UID: 1000, Mode: fi.Mode()}, nil
}

func TestDiscoverySkipsFilesOthersControl(t *testing.T) {
	shared := filepath.Join(canonical(t.TempDir()), "shared") // stands for /tmp
	mine := filepath.Join(shared, "me", "proj")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(shared, ProjectFileName)
	if err := os.WriteFile(planted, []byte("memory: 512m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sticky := Ownership{UID: 0, Mode: fs.ModeDir | fs.ModeSticky | 0o777}
	tests := []struct {
		name     string
		owners   owners
		wd       string
		wantRoot string
		wantFrom string
		skipped  string // a part of the one warning
	}{
		{name: "another user's file in a sticky directory", owners: owners{shared: sticky, planted: {UID: 1001, Mode: 0o644}},
			wd: mine, wantRoot: mine, wantFrom: RootFromWorkDir, skipped: planted + ": it is owned by uid 1001"},
		{name: "my own file in a sticky directory", owners: owners{shared: sticky},
			wd: mine, wantRoot: shared, wantFrom: RootFromFile},
		{name: "a root-owned file", owners: owners{planted: {UID: 0, Mode: 0o644}},
			wd: mine, wantRoot: shared, wantFrom: RootFromFile},
		{name: "a world-writable file of mine", owners: owners{planted: {UID: 1000, Mode: 0o666}},
			wd: mine, wantRoot: mine, wantFrom: RootFromWorkDir, skipped: "it is writable by every user"},
		{name: "a group-writable file of mine (umask 002)", owners: owners{planted: {UID: 1000, Mode: 0o664}},
			wd: mine, wantRoot: shared, wantFrom: RootFromFile},
		{name: "a world-writable directory without the sticky bit", owners: owners{shared: {UID: 1000, Mode: fs.ModeDir | 0o777}},
			wd: mine, wantRoot: mine, wantFrom: RootFromWorkDir, skipped: "its directory is writable by every user"},
		{name: "another user's directory", owners: owners{shared: {UID: 1001, Mode: fs.ModeDir | 0o755}},
			wd: mine, wantRoot: mine, wantFrom: RootFromWorkDir, skipped: "its directory is owned by uid 1001"},
		{name: "run in the shared directory itself", owners: owners{shared: sticky, planted: {UID: 1001, Mode: 0o644}},
			wd: shared, wantRoot: shared, wantFrom: RootFromWorkDir, skipped: "owned by uid 1001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Inputs{
				WorkingDir:  func() (string, error) { return tt.wd, nil },
				HomeDir:     func() (string, error) { return t.TempDir(), nil },
				GitTopLevel: func(string) (string, bool) { return "", false },
				Ownership:   tt.owners.of,
				UID:         func() int { return 1000 },
			}
			r, err := Resolve(in)
			if err != nil {
				t.Fatalf("resolve: %v", err)
			}
			if read := r.Config.Memory == 512<<20; read != (tt.wantFrom == RootFromFile) {
				t.Errorf("the file at %s was read: %v", planted, read)
			}
			if r.ProjectRoot != tt.wantRoot || r.ProjectRootFrom != tt.wantFrom {
				t.Errorf("root %s (%s), want %s (%s)", r.ProjectRoot, r.ProjectRootFrom, tt.wantRoot, tt.wantFrom)
			}
			var warn []string
			for _, s := range r.Skipped {
				warn = append(warn, s.String())
			}
			switch {
			case tt.skipped == "" && len(warn) > 0:
				t.Errorf("skipped %v", warn)
			case tt.skipped != "" && (len(warn) != 1 || !strings.Contains(warn[0], tt.skipped)):
				t.Errorf("skipped %v, want one saying %q", warn, tt.skipped)
			}
			for _, f := range r.Files {
				if f.Path == planted && tt.skipped != "" {
					t.Errorf("the skipped file was read: %+v", r.Files)
				}
			}
		})
	}
}

// A .git another user owns does not make the project root either.
func TestDiscoverySkipsAnotherUsersGit(t *testing.T) {
	top := canonical(t.TempDir())
	wd := filepath.Join(top, "sub")
	if err := os.MkdirAll(filepath.Join(top, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	own := owners{filepath.Join(top, ".git"): {UID: 1001, Mode: fs.ModeDir | 0o755}}
	root, from, skipped, err := FindProjectRoot(wd, "", Discovery{Ownership: own.of, UID: func() int { return 1000 }})
	if err != nil || root != wd || from != RootFromWorkDir || len(skipped) != 1 || !strings.Contains(skipped[0].String(), "uid 1001") {
		t.Errorf("root %s from %s, skipped %v, err %v", root, from, skipped, err)
	}
	root, from, skipped, _ = FindProjectRoot(wd, "", Discovery{Ownership: owners{}.of, UID: func() int { return 1000 }})
	if root != top || from != RootFromGit || len(skipped) != 0 {
		t.Errorf("my own .git: root %s from %s, skipped %v", root, from, skipped)
	}
}
