package images

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
)

// copyFS returns the embedded files as a map a test can edit.
func copyFS(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	for _, p := range Profiles {
		for _, f := range ContextFiles(p) {
			data, err := fs.ReadFile(Files, f.Name)
			if err != nil {
				t.Fatal(err)
			}
			m[f.Name] = &fstest.MapFile{Data: data}
		}
	}
	return m
}

func hashes(t *testing.T, fsys fs.FS) map[string]string {
	t.Helper()
	h := map[string]string{}
	for _, p := range Profiles {
		sum, err := Hash(fsys, p)
		if err != nil {
			t.Fatalf("Hash(%s): %v", p, err)
		}
		if !strings.HasPrefix(sum, "sha256:") || len(sum) != len("sha256:")+64 {
			t.Errorf("Hash(%s) = %q", p, sum)
		}
		h[p] = sum
	}
	return h
}

func TestHashIsStable(t *testing.T) {
	a, b := hashes(t, Files), hashes(t, copyFS(t))
	for _, p := range Profiles {
		if a[p] != b[p] {
			t.Errorf("%s: embedded %s, copy %s", p, a[p], b[p])
		}
	}
	if a[ProfileSandbox] == a[ProfileCommon] || a[ProfileCommon] == a[ProfileBrowser] {
		t.Errorf("profiles share a hash: %v", a)
	}
}

func TestHashChanges(t *testing.T) {
	base := hashes(t, Files)
	tests := []struct {
		file    string
		changed []string // profiles whose hash must change; the others must not
	}{
		{"Dockerfile.sandbox", []string{ProfileSandbox, ProfileCommon, ProfileBrowser}},
		{"Dockerfile.sandbox-common", []string{ProfileCommon}},
		{"Dockerfile.sandbox-browser", []string{ProfileBrowser}},
		{"sbx-browser-entrypoint.sh", []string{ProfileBrowser}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			m := copyFS(t)
			m[tt.file].Data = append(m[tt.file].Data, '\n')
			got := hashes(t, m)
			for _, p := range Profiles {
				want := !contains(tt.changed, p)
				if (got[p] == base[p]) != want {
					t.Errorf("after editing %s, %s hash changed = %v, want %v", tt.file, p, got[p] != base[p], !want)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestHashMissingFile(t *testing.T) {
	m := copyFS(t)
	delete(m, "sbx-browser-entrypoint.sh")
	if _, err := Hash(m, ProfileBrowser); err == nil || !strings.Contains(err.Error(), "sbx-browser-entrypoint.sh") {
		t.Errorf("err = %v, want one naming the missing file", err)
	}
	if _, err := Hash(Files, "nope"); err == nil {
		t.Error("Hash of an unknown profile succeeded")
	}
}

func TestProfiles(t *testing.T) {
	for _, p := range Profiles {
		tag, ok := TagFor(p)
		if !ok {
			t.Fatalf("no tag for %s", p)
		}
		if back, ok := ProfileFor(tag); !ok || back != p {
			t.Errorf("ProfileFor(%s) = %s, %v", tag, back, ok)
		}
		files := ContextFiles(p)
		if len(files) == 0 || !strings.HasPrefix(files[0].Name, "Dockerfile.") {
			t.Errorf("%s: context files %v must start with the Dockerfile", p, files)
		}
		if base := BaseOf(p); base != "" && (base != ProfileSandbox || p == ProfileSandbox) {
			t.Errorf("BaseOf(%s) = %q", p, base)
		}
	}
	if _, ok := ProfileFor("debian:bookworm-slim"); ok {
		t.Error("ProfileFor a foreign tag succeeded")
	}
}

// TestDockerfiles guards what sbx relies on at run time: the user, the workdir, the base
// image argument, and no VOLUME (which would defeat the read-only root).
func TestDockerfiles(t *testing.T) {
	for _, p := range Profiles {
		name := ContextFiles(p)[0].Name
		data, _ := fs.ReadFile(Files, name)
		df := string(data)
		if !strings.Contains(df, "\nUSER sandbox\n") {
			t.Errorf("%s does not end up as USER sandbox", name)
		}
		if strings.Contains(df, "\nVOLUME") {
			t.Errorf("%s declares a VOLUME", name)
		}
		if !strings.Contains(df, "rm -rf /var/lib/apt/lists/*") {
			t.Errorf("%s keeps the apt lists", name)
		}
		if BaseOf(p) != "" && !strings.Contains(df, "ARG BASE_IMAGE=") {
			t.Errorf("%s has no ARG BASE_IMAGE", name)
		}
	}
}
