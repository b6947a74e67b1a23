//go:build linux

package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sbx-sandbox/sbx/internal/scripttest"
)

func TestScriptsAreEmbedded(t *testing.T) { scripttest.CheckEmbedded(t) }

// plant writes files under dir, making directories as needed.
func plant(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func runOnHost(t *testing.T, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{"-c", script, "sbx-script"}, args...)...).Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return string(out)
}

// The process list reads each record's files as the sandbox left them: only so much of each,
// only regular files (a FIFO would block it), and only directories named as sbx names them.
func TestProcListScriptReadsLittle(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	big := `{"command":["` + strings.Repeat("x", 1<<20) + `"]}`
	plant(t, dir, map[string]string{
		"ok1/meta": `{"command":["sleep","9"]}` + "\n", "ok1/pid": "1 1700000000.5 1\n", "ok1/chunk": "262144\n",
		"ok1/stdout.n": "2\textra\tfields\n", "ok1/exit": strings.Repeat("7", 1<<20),
		"big/meta":  big,
		"fifo/meta": "{}\n",
		"a b/meta":  "{}\n", "bad\x1b[2J/meta": "{}\n", strings.Repeat("l", 65) + "/meta": "{}\n",
		"nometa/pid": "1 1 1\n",
	})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo", "pid"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "big", "pid")); err != nil {
		t.Fatal(err)
	}
	out := runOnHost(t, procList, dir, strconv.Itoa(MaxMeta), "")
	if len(out) > MaxMeta+1024 {
		t.Fatalf("%d bytes of list", len(out))
	}
	list, err := ParseList(out)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]Proc{}
	for _, p := range list {
		ids[p.ID] = p
	}
	if len(ids) != 3 || ids["ok1"].PID != 1 || ids["ok1"].Command == nil || ids["big"].Command != nil || ids["fifo"].ID != "fifo" {
		t.Errorf("%+v", list)
	}
	if p := ids["ok1"]; p.State != "exited" || p.DroppedStdout != 0 {
		t.Errorf("ok1: %+v", p)
	}
	err = exec.Command("bash", "-c", procList, "sbx-script", dir, strconv.Itoa(MaxMeta), "nope").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("only nope: %v, want exit 3", err)
	}
}

func TestShellListScriptReadsLittle(t *testing.T) {
	for _, tool := range []string{"bash", "flock", "readlink", "stat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	dir := t.TempDir()
	plant(t, dir, map[string]string{
		"gone/pid": "999999999 1 1764504000.250000\n", "long/pid": strings.Repeat("1", 1<<20),
		"bad\x1b[2J/pid": "1 1 1\n", "nopid/last": "",
	})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "fifo2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo2", "pid"), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := ParseSessions(runOnHost(t, shellList, dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "gone" || list[0].State != "exited" || list[1].Name != "long" || list[1].State != "exited" {
		t.Errorf("%+v", list)
	}
}
