package overlay

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestExclude(t *testing.T) {
	e, err := NewExclude([]string{"node_modules/", "*.log", "/build", "docs/**/*.tmp", "cache/**"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		rel  string
		dir  bool
		want bool
	}{
		{"node_modules", true, true}, {"a/node_modules", true, true}, {"node_modules", false, false},
		{"x.log", false, true}, {"a/b/x.log", false, true}, {"x.logs", false, false},
		{"build", true, true}, {"a/build", true, false},
		{"docs/x.tmp", false, true}, {"docs/a/b/x.tmp", false, true}, {"other/x.tmp", false, false},
		{"cache/a/b", false, true}, {"cache", true, false}, {"src/main.go", false, false},
	} {
		if got := e.Match(tt.rel, tt.dir); got != tt.want {
			t.Errorf("Match(%q, dir %v) = %v, want %v", tt.rel, tt.dir, got, tt.want)
		}
	}
	for _, bad := range []string{"!keep", "", "/", "a/../b", `\#x`, "[ab]"} {
		if _, err := NewExclude([]string{bad}); err == nil {
			t.Errorf("NewExclude(%q) took it", bad)
		}
	}
}

// TestCarriedChanges carries a project, changes the copy as a sandbox would and the host as
// a user would: only the sandbox's changes show, and the host's edit of a path the sandbox
// also changed is a conflict.
func TestCarriedChanges(t *testing.T) {
	root := t.TempDir()
	lower, dir := filepath.Join(root, "project"), filepath.Join(root, "state")
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"same", "edited", "deleted", "hostedit", "both", "skip/x"} {
		write(filepath.Join(lower, f), f+"\n")
	}
	if err := os.Symlink("same", filepath.Join(lower, "link")); err != nil {
		t.Fatal(err)
	}
	l := Layers{Lower: lower, Dir: dir, Carried: true}
	ex, err := NewExclude([]string{"skip/"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	carried, err := Carry(l, ex, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := carried.Save(); err != nil {
		t.Fatal(err)
	}
	// The sandbox's copy: what the tar held, then changed.
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		p := filepath.Join(l.Upper(), h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			_ = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			_ = os.Symlink(h.Linkname, p)
		default:
			data, _ := io.ReadAll(tr)
			write(p, string(data))
		}
	}
	if want := []string{"both", "deleted", "edited", "hostedit", "link", "same"}; !slices.Equal(names, want) {
		t.Fatalf("carried %q, want %q", names, want)
	}
	write(filepath.Join(l.Upper(), "edited"), "sandbox\n")
	write(filepath.Join(l.Upper(), "both"), "sandbox\n")
	write(filepath.Join(l.Upper(), "added"), "new\n")
	_ = os.Remove(filepath.Join(l.Upper(), "deleted"))
	write(filepath.Join(lower, "hostedit"), "host\n")
	write(filepath.Join(lower, "both"), "host, longer\n")
	write(filepath.Join(lower, "hostnew"), "host\n")

	changes, err := l.Changes(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.Path+" "+c.Status+" "+c.Conflict)
	}
	want := []string{"added added ", "both modified changed on the host since the sandbox was created", "deleted deleted ", "edited modified "}
	if !slices.Equal(got, want) {
		t.Fatalf("changes:\n%q\nwant\n%q", got, want)
	}
	if _, err := l.Discard(nil); err == nil {
		t.Fatal("discard of a carried workspace went ahead")
	}
}
