package adversarial_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Each abuse runs through sbx exec against the default configuration, then the sandbox must
// answer again: a sandbox that a bomb leaves unusable is a denial of service on its user.
func TestResourceAbuse(t *testing.T) {
	sc := abuseGroup.start(t)
	s := newSBX(t)
	installProbe(t, s.Project, "probe", 0o755)
	name := sandboxName("abuse")
	if r := s.Run("create", "-n", name); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	abuse := func(label string, f func(t *testing.T, s *clitest.CLI)) {
		t.Run(label, func(t *testing.T) {
			sc.case_(t)
			s := s.In(t)
			f(t, s)
			alive(s, name)
		})
	}

	abuse("fork bomb", func(t *testing.T, s *clitest.CLI) {
		r := s.Run("exec", "-n", name, "--timeout", "5s", "--", "bash", "-c", "bomb() { bomb | bomb & }; while :; do bomb; done")
		if r.Code != 124 || r.Took > 60*time.Second {
			t.Errorf("want exit 124 after the 5 s timeout: %s", r)
		}
		if !strings.Contains(r.Stderr, "Resource temporarily unavailable") {
			t.Errorf("the bomb never hit the pids limit: %s", r)
		}
	})

	abuse("memory bomb", func(t *testing.T, s *clitest.CLI) {
		// 64 MiB at a time, touched, until the 1 GiB limit (no swap) stops it.
		r := s.Run("exec", "-n", name, "--", "python3", "-c", "b = []\nwhile True: b.append(bytearray(64 << 20))")
		if r.Code != 137 || !strings.Contains(r.Stderr, "out of memory, limit 1g") {
			t.Errorf("want an OOM kill reported as such: %s", r)
		}
	})

	abuse("filling /tmp", func(t *testing.T, s *clitest.CLI) {
		res := probeIn(t, s, name, "fill:/tmp/sbx-fill,"+strconv.Itoa(1<<30))
		n, _ := strconv.ParseInt(res.Value, 10, 64)
		// The last partial page can be refused, so "full" is within 1 MiB of the cap.
		if res.Errno != "ENOSPC" || n > 256<<20 || n < 255<<20 {
			t.Errorf("want ENOSPC at the 256 MiB cap: wrote %d bytes, %s %s", n, res.Errno, res.Detail)
		}
		if after := probeIn(t, s, name, "create:/tmp/sbx-after"); after.Errno != "" {
			t.Errorf("/tmp unusable after the fill was removed: %s", after.Detail)
		}
	})

	abuse("10 000 files in /tmp", func(t *testing.T, s *clitest.CLI) {
		if res := probeIn(t, s, name, "files:/tmp/sbx-many,10000"); res.Errno != "" || res.Value != "10000" {
			t.Errorf("want 10000 files: %+v", res)
		}
	})

	abuse("1 GiB of output through sbx exec", func(t *testing.T, s *clitest.CLI) {
		var n atomic.Int64
		cmd := s.Cmd("exec", "-n", name, "--", "head", "-c", strconv.Itoa(1<<30), "/dev/zero")
		cmd.Stdout = countingWriter{&n}
		r := s.RunIn(cmd)
		if r.Code != 0 || n.Load() != 1<<30 {
			t.Fatalf("want 1 GiB through stdout, got %d bytes: %s", n.Load(), r)
		}
		// sbx streams: its peak resident memory must not grow with the output.
		if r.MaxRSS == 0 || r.MaxRSS > 100<<20 {
			t.Errorf("sbx's peak RSS was %d MiB for 1 GiB of output; want under 100 MiB", r.MaxRSS>>20)
		}
		t.Logf("sbx peak RSS %d MiB, %s for 1 GiB", r.MaxRSS>>20, r.Took.Round(time.Millisecond))
	})

	abuse("a command that ignores SIGTERM", func(t *testing.T, s *clitest.CLI) {
		r := s.Run("exec", "-n", name, "--timeout", "2s", "--", "bash", "-c", "trap '' TERM; sleep 4242 & while :; do sleep 1; done")
		// The watchdog sends TERM at 2 s, waits the grace period, then KILLs: never earlier.
		minimum := 2*time.Second + sandbox.KillGrace
		if r.Code != 124 || !strings.Contains(r.Stderr, "timed out after 2s") || r.Took < minimum || r.Took > minimum+30*time.Second {
			t.Errorf("want exit 124 after at least %s (timeout plus grace): %s", minimum, r)
		}
		if left := s.Running(name, "sleep 4242"); len(left) > 0 {
			t.Errorf("processes survived the kill: %q", left)
		}
	})
}

// The private workspace of mode none is an engine volume. The engine's local driver has no
// size limit on this storage (overlay2 on a file system without project quotas), so the
// volume shares the engine's disk with everything else; sbx cannot cap it through the Engine
// API (a tmpfs volume would lose the workspace at every stop, and a loop device needs files
// on the engine's host). This test pins that documented behaviour: if a cap appears, update
// it and the README.
func TestResourceAbuseWorkspaceVolumeIsUncapped(t *testing.T) {
	abuseGroup.start(t)
	s := newSBX(t)
	s.Write(".sbx.yaml", "workspace: none\n")
	name := sandboxName("nonews")
	// 300 MiB: more than any tmpfs of the sandbox holds, little enough for any test host.
	r := s.Run("exec", "-n", name, "--", "bash", "-c",
		`head -c 314572800 /dev/zero >/workspace/big && stat -c %s /workspace/big && rm /workspace/big && stat -f -c '%b %S' /workspace`)
	if r.Code != 0 {
		t.Fatalf("writing 300 MiB to the workspace volume: %s", r)
	}
	lines := strings.Fields(r.Stdout)
	if len(lines) != 3 || lines[0] != "314572800" {
		t.Fatalf("unexpected output: %s", r)
	}
	blocks, _ := strconv.ParseUint(lines[1], 10, 64)
	bsize, _ := strconv.ParseUint(lines[2], 10, 64)
	info, err := s.Eng.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(info.DockerRootDir, "volumes"), &st); err != nil {
		cannotRun(t, "the engine's data root %s is not on this host (%v), so its size cannot be compared", info.DockerRootDir, err)
	}
	if inside, host := blocks*bsize, st.Blocks*uint64(st.Bsize); inside != host {
		t.Errorf("the workspace volume reports %d bytes, the engine's disk %d: a cap exists now; update this test and the README", inside, host)
	}
	alive(s, name)
}

// probeIn runs one probe operation in sandbox name.
func probeIn(t *testing.T, s *clitest.CLI, name, op string) probeResult {
	t.Helper()
	r := s.Run("exec", "-n", name, "--", "/workspace/probe", op)
	if r.Code != 0 {
		t.Fatalf("probe %s: %s", op, r)
	}
	return parseProbe(t, r.Stdout)[op]
}

type countingWriter struct{ n *atomic.Int64 }

func (w countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// Every process of the sandbox user may write to the main process's stdout (/proc/1/fd/1),
// which the engine keeps as the container's log on its own disk. 300 MiB written there leaves
// at most the documented 1 MiB (json-file, max-size 1m, one file).
func TestResourceAbuseContainerLogIsCapped(t *testing.T) {
	sc := abuseGroup.start(t)
	sc.case_(t)
	s := newSBX(t)
	name := sandboxName("logflood")
	r := s.Run("exec", "-n", name, "--", "bash", "-c", "head -c 314572800 /dev/zero | tr '\\0' x | fold -w 1023 >/proc/1/fd/1")
	if r.Code != 0 {
		t.Fatalf("writing 300 MiB to pid 1's stdout: %s", r)
	}
	ctx := context.Background()
	info, err := s.Eng.ContainerInspect(ctx, sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	if lc := info.HostConfig.LogConfig; lc.Type != "json-file" || lc.Config["max-size"] != "1m" {
		t.Errorf("log config %+v", lc)
	}
	logs, err := s.Eng.ContainerLogs(ctx, info.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	n, err := io.Copy(io.Discard, logs)
	if err != nil {
		t.Fatal(err)
	}
	// What the engine serves is the kept log, demultiplexing headers included.
	if n == 0 || n > 2<<20 {
		t.Errorf("the container's log holds %d bytes of the 300 MiB, want at most about 1 MiB", n)
	}
	if fi, err := os.Stat(info.LogPath); err == nil && fi.Size() > 1<<20+64<<10 {
		t.Errorf("the log file %s is %d bytes on the engine's disk", info.LogPath, fi.Size())
	} else if err != nil {
		t.Logf("the log file is not on this host (%v); checked what the engine serves", err)
	}
	alive(s, name)
}
