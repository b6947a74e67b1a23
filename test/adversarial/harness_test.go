package adversarial_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// newSBX gives t an sbx against the shared engine; everything it creates there is removed
// when t ends, however it ends.
func newSBX(t *testing.T) *clitest.CLI {
	t.Helper()
	return newSBXOn(t, enginetest.RealEngine(t), "")
}

// newSBXOn gives t an sbx against eng, reached through dockerHost ("" keeps the caller's
// DOCKER_HOST).
func newSBXOn(t *testing.T, eng engine.Engine, dockerHost string) *clitest.CLI {
	t.Helper()
	return clitest.New(t, run, eng, dockerHost)
}

// alive waits (up to 10 s: init reaps a bomb's last processes a moment after the kill)
// until sandbox name runs a command again.
func alive(s *clitest.CLI, name string) {
	s.T.Helper()
	var r clitest.Result
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if r = s.Run("exec", "-n", name, "--", "echo", "alive"); r.Code == 0 && r.Stdout == "alive\n" {
			return
		}
	}
	s.T.Fatalf("sandbox %s is not usable any more: %s", name, r)
}

// sandboxName is a name unique to this run.
func sandboxName(suffix string) string { return run + "-" + suffix }

// probeResult is one JSON line of the probe (see ./probe).
type probeResult struct {
	Op     string `json:"op"`
	Errno  string `json:"errno"`
	Value  string `json:"value"`
	Detail string `json:"detail"`
}

// parseProbe reads the probe's JSON lines, keyed by operation.
func parseProbe(t *testing.T, out string) map[string]probeResult {
	t.Helper()
	res := map[string]probeResult{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r probeResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("probe output %q: %v", sc.Text(), err)
		}
		res[r.Op] = r
	}
	return res
}

// hostProbe runs the probe on the host, as the test runs, to learn what this kernel offers.
func hostProbe(t *testing.T, op string) probeResult {
	t.Helper()
	out, err := exec.Command(probeBin, op).Output()
	if err != nil {
		t.Fatalf("probe %s on the host: %v", op, err)
	}
	r := parseProbe(t, string(out))[op]
	return r
}

// installProbe puts the probe into dir (a project, which sandboxes see at /workspace) with
// the Unix mode bits mode (0o4755 for setuid).
func installProbe(t *testing.T, dir, name string, mode uint32) string {
	t.Helper()
	src, err := os.Open(probeBin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	p := filepath.Join(dir, name)
	dst, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	// Chmod after writing: the umask cannot take bits away, and a write would clear setuid.
	if err := syscall.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}
