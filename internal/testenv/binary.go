package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// SbxBinary is the path of a static sbx binary (CGO_ENABLED=0, as make build makes it, so
// sandboxes on any image run it as their agent), built on the first call in this process;
// TestMain calls RemoveSbxBinary once the tests have run.
func SbxBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbx-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "sbx")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/sbx-sandbox/sbx")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RemoveSbxBinary removes what SbxBinary built, if it built anything.
func RemoveSbxBinary() {
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
}
