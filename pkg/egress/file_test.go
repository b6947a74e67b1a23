package egress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFile(t *testing.T) {
	f, err := ParseFile([]byte(`{"version": 1, "allow": ["@go", "github.com:22"], "deny": ["sum.golang.org"], "internal": ["192.0.2.2", "fd00:1::/64"]}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Allow()) != 3 || len(p.Deny()) != 1 || len(p.Internal()) != 2 || p.Internal()[0].String() != "192.0.2.2/32" {
		t.Errorf("allow %v deny %v internal %v", p.Allow(), p.Deny(), p.Internal())
	}
	if d := p.Decide("sum.golang.org", 443); d.Allowed || d.Rule != "sum.golang.org" {
		t.Errorf("deny entry: %+v", d)
	}
}

func TestParseFileRefused(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"version": 1, "allow": [], "extra": 1}`, `unknown field "extra"`},
		{`{"version": 2, "allow": []}`, "rules file version 2, this sbx reads version 1"},
		{`{"allow": []}`, "rules file version 0"},
		{`{"version": 1, "allow": []} {}`, "data after the object"},
		{`[]`, "decoding rules file"},
		{`{"version": 1, "allow": "pypi.org"}`, "decoding rules file"},
		{strings.Repeat(" ", MaxFileSize+1), "larger than"},
	}
	for _, tt := range tests {
		if _, err := ParseFile([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.40q: got %v, want %q", tt.in, err, tt.want)
		}
	}
	policies := []struct {
		f    File
		want string
	}{
		{File{Allow: []string{"@nope"}}, `allow: egress rule "@nope": unknown preset`},
		{File{Deny: []string{"a b"}}, `deny: egress rule "a b": a name with the character ' '`},
		{File{Internal: []string{"pypi.org"}}, `internal "pypi.org": not an address or network`},
		{File{Internal: []string{"10.1.2.3/8"}}, `internal "10.1.2.3/8": host bits set in a network; did you mean 10.0.0.0/8?`},
	}
	for _, tt := range policies {
		if _, err := tt.f.Policy(); err == nil || err.Error() != tt.want {
			t.Errorf("%+v: got %v, want %q", tt.f, err, tt.want)
		}
	}
}

func TestWriteFileReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.json")
	if err := WriteFile(path, File{Allow: []string{"@python", "10.0.0.0/8:5432"}, Deny: []string{"pypi.org:80"}}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 1,
  "allow": [
    "@python",
    "10.0.0.0/8:5432"
  ],
  "deny": [
    "pypi.org:80"
  ]
}
`
	if string(data) != want {
		t.Errorf("file:\n%s", data)
	}
	p, err := ReadFile(path)
	if err != nil || len(p.Allow()) != 3 || p.Deny()[0].Text != "pypi.org:80" {
		t.Errorf("read back: %v, %v", p, err)
	}
	// A bad file is never written, and nothing is left behind.
	if err := WriteFile(path, File{Allow: []string{"@nope"}}); err == nil {
		t.Error("a bad file was written")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.json")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}
