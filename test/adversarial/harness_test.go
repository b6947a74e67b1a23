package adversarial_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// sbx runs the real binary as a user would: its own HOME, config and state directories, a
// fresh project directory, and the run's label on every sandbox it creates.
type sbx struct {
	t       *testing.T
	eng     engine.Engine // the engine sbx talks to, for checks and cleanup
	home    string
	project string
	env     []string
	marker  string // SBX_HOST_MARKER's value: it must never show up inside
}

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
	maxRSS         int64 // bytes, from the kernel's accounting of the sbx process
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %s\nstdout: %.2000q\nstderr: %.2000q", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// newSBX gives t an sbx against the shared engine; everything it creates there is removed
// when t ends, however it ends.
func newSBX(t *testing.T) *sbx {
	t.Helper()
	return newSBXOn(t, enginetest.RealEngine(t), "")
}

// newSBXOn gives t an sbx against eng, reached through dockerHost ("" keeps the caller's
// DOCKER_HOST).
func newSBXOn(t *testing.T, eng engine.Engine, dockerHost string) *sbx {
	t.Helper()
	// The project is not a sibling of $HOME, so a path above it is not judged as "contains
	// your home directory".
	s := &sbx{t: t, eng: eng, home: t.TempDir(), project: filepath.Join(t.TempDir(), "project"), marker: "host-marker-" + run}
	if err := os.Mkdir(s.project, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		// The caller's own sbx settings (SBX_MEMORY, ...) must not shape the tests.
		if !strings.HasPrefix(kv, "SBX_") && !(dockerHost != "" && strings.HasPrefix(kv, "DOCKER_")) {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "HOME="+s.home, "XDG_CONFIG_HOME="+filepath.Join(s.home, ".config"),
		"XDG_STATE_HOME="+filepath.Join(s.home, ".state"), "SBX_TEST_LABEL="+run, "NO_COLOR=1",
		"SBX_HOST_MARKER="+s.marker)
	if dockerHost != "" {
		s.env = append(s.env, "DOCKER_HOST="+dockerHost)
	}
	t.Cleanup(s.removeAll)
	return s
}

// removeAll removes every sandbox and volume of this run that belongs to s's project, with
// sbx first (as a user would) and by force through the engine if that fails.
func (s *sbx) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mine := filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+run), filters.Arg("label", sandbox.LabelProject+"="+s.project))
	list, err := s.eng.ContainerList(ctx, container.ListOptions{All: true, Filters: mine})
	if err != nil {
		s.t.Errorf("cleanup: listing containers: %v", err)
		return
	}
	for _, c := range list {
		if r := s.run("rm", "-f", c.Labels[sandbox.LabelName]); r.code != 0 {
			s.t.Logf("cleanup: sbx rm -f %s: %s", c.Labels[sandbox.LabelName], r.stderr)
			if err := s.eng.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
				s.t.Errorf("cleanup: %v", err)
			}
		}
	}
	vols, err := s.eng.VolumeList(ctx, volume.ListOptions{Filters: mine})
	if err != nil {
		s.t.Errorf("cleanup: listing volumes: %v", err)
		return
	}
	for _, v := range vols.Volumes {
		if err := s.eng.VolumeRemove(ctx, v.Name, true); err != nil {
			s.t.Errorf("cleanup: %v", err)
		}
	}
}

// in returns s for use in subtest t, so its helpers fail t rather than the parent.
func (s *sbx) in(t *testing.T) *sbx {
	c := *s
	c.t = t
	c.env = append([]string(nil), s.env...)
	return &c
}

func (s *sbx) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(sbxBin, args...)
	cmd.Dir, cmd.Env = s.project, s.env
	return cmd
}

func (s *sbx) run(args ...string) result { s.t.Helper(); return s.runIn(s.cmd(args...)) }

// runIn runs cmd to its end, collecting stdout unless cmd already has a Stdout.
func (s *sbx) runIn(cmd *exec.Cmd) result {
	s.t.Helper()
	res, err := runCmd(cmd)
	if err != nil {
		s.t.Fatalf("running sbx %v: %v", cmd.Args[1:], err)
	}
	return res
}

// concurrently runs every command at once and returns their results in order. It may run
// outside the test's goroutine, so it reports a command that could not start in its result.
func concurrently(cmds []*exec.Cmd) []result {
	results := make([]result, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if results[i], err = runCmd(cmd); err != nil {
				results[i] = result{code: -1, stderr: "sbx did not run: " + err.Error()}
			}
		}()
	}
	wg.Wait()
	return results
}

func runCmd(cmd *exec.Cmd) (result, error) {
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errb
	}
	start := time.Now()
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			res.maxRSS = ru.Maxrss << 10 // Linux reports KiB
		}
	}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		return res, err
	}
	return res, nil
}

// write creates a file in the project.
func (s *sbx) write(rel, content string) {
	s.t.Helper()
	p := filepath.Join(s.project, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// trust trusts the project's .sbx.yaml as it is now, as a user does after reviewing it.
func (s *sbx) trust() {
	s.t.Helper()
	if r := s.run("trust", "--yes"); r.code != 0 {
		s.t.Fatalf("sbx trust --yes: %s", r)
	}
}

// containers lists the containers of sandbox name, running or not.
func (s *sbx) containers(name string) []container.Summary {
	s.t.Helper()
	list, err := s.eng.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("name", "^/"+sandbox.ContainerName(name)+"$"))})
	if err != nil {
		s.t.Fatal(err)
	}
	return list
}

// alive waits (up to 10 s: init reaps a bomb's last processes a moment after the kill)
// until sandbox name runs a command again.
func (s *sbx) alive(name string) {
	s.t.Helper()
	var r result
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if r = s.run("exec", "-n", name, "--", "echo", "alive"); r.code == 0 && r.stdout == "alive\n" {
			return
		}
	}
	s.t.Fatalf("sandbox %s is not usable any more: %s", name, r)
}

// running lists the command lines in sandbox name that start with prefix.
func (s *sbx) running(name, prefix string) []string {
	s.t.Helper()
	r := s.run("exec", "-n", name, "--", "bash", "-c", `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' <$p/cmdline 2>/dev/null) && echo "$c"; done; exit 0`)
	if r.code != 0 {
		s.t.Fatalf("listing processes: %s", r)
	}
	var out []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
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
