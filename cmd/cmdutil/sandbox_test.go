package cmdutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
)

// A seccomp profile may lie where a sandbox can write; sbx never reads it without a bound.
func TestSpecInputBoundsTheSeccompProfile(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, make([]byte, maxSeccompProfile+1), 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	ios, _, _, _ := iostreams.Test()
	f := TestFactory(ios, nil, dir, dir, time.Now(), nil)
	for p, want := range map[string]string{huge: "larger than 1m", zero: "not a regular file"} {
		r := &config.Resolved{Name: "x", ProjectRoot: dir, Config: config.Defaults()}
		r.Config.SeccompProfile = p
		if _, err := SpecInput(f, r); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", p, err, want)
		}
	}
}
