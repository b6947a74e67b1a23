package adversarial_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// baseImage is the one image the private engine gets: it has bash and setsid, which sbx's
// exec wrapper needs, and loading it takes seconds where the bundled images take minutes.
const baseImage = "debian:bookworm-slim"

// privateEngine is a second dockerd of the test's own, so restarting it cannot disturb the
// shared engine that other tests (and other engineers) use. It has its own data root, exec
// root (where it starts its own containerd), pid file and socket, no bridge and no
// iptables rules, so it touches nothing of the host's networking.
type privateEngine struct {
	t       *testing.T
	bin     string
	args    []string
	host    string // unix:///run/sbx-fault-RUN/docker.sock
	data    string
	execDir string
	log     string
	cmd     *exec.Cmd
	exited  chan struct{}
	cli     *client.Client
}

// startPrivateEngine starts the private engine, or says why this host cannot.
func startPrivateEngine(t *testing.T) *privateEngine {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, testenv.RequireRootEnv, cannotPrefix+"a private dockerd needs root, and the test runs as uid %d", os.Geteuid())
	}
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		cannotRun(t, "no dockerd binary to start a private engine with: %v", err)
	}
	// The exec root holds containerd's sockets, whose paths must stay short: keep it in /run.
	runDir := filepath.Join("/run", "sbx-fault-"+run)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	e := &privateEngine{t: t, bin: bin, host: "unix://" + filepath.Join(runDir, "docker.sock"), data: t.TempDir(), execDir: filepath.Join(runDir, "exec")}
	e.log = filepath.Join(e.data, "dockerd.log")
	e.args = []string{
		"--data-root", filepath.Join(e.data, "root"), "--exec-root", e.execDir,
		"--pidfile", filepath.Join(runDir, "docker.pid"), "-H", e.host,
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false", "--ip-forward=false",
		// Its own containerd namespaces, in case this dockerd finds a system containerd to share.
		"--containerd-namespace", "sbx-fault-" + run, "--containerd-plugins-namespace", "sbx-fault-" + run + "-plugins",
		"--log-level", "warn",
	}
	t.Cleanup(func() {
		e.stop()
		e.unmountBelow(e.data, e.execDir)
		if err := os.RemoveAll(runDir); err != nil {
			t.Errorf("removing %s: %v", runDir, err)
		}
	})
	e.start()
	return e
}

// start starts the private dockerd and waits until it answers.
func (e *privateEngine) start() {
	e.t.Helper()
	logf, err := os.OpenFile(e.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	defer logf.Close()
	e.cmd = exec.Command(e.bin, e.args...)
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	// Its own process group, so a signal meant for the test run does not reach it directly;
	// and TERM when the test process dies (a timeout panic skips the cleanups), so it
	// stops its containers and containerd instead of outliving the run.
	// Its own network namespace too: a dockerd with --bridge=none deletes the host's docker0
	// at start (removeDefaultBridgeInterface), which breaks the shared engine's bridge.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Cloneflags: syscall.CLONE_NEWNET}
	if err := e.cmd.Start(); err != nil {
		e.t.Fatalf("starting the private dockerd: %v", err)
	}
	e.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(e.cmd, e.exited)
	if e.cli == nil {
		if e.cli, err = client.NewClientWithOpts(client.WithHost(e.host), client.WithAPIVersionNegotiation()); err != nil {
			e.t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := e.cli.Ping(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-e.exited:
			e.t.Fatalf("the private dockerd exited at start:\n%s", e.tail())
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the private dockerd did not answer within 60 s: %v\n%s", err, e.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop ends the private dockerd as an init system would: TERM, then KILL after 30 s. It
// stops the containers it runs (live-restore is off) and its own containerd.
func (e *privateEngine) stop() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	select {
	case <-e.exited:
		return
	default:
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(30 * time.Second):
		e.t.Errorf("the private dockerd ignored TERM for 30 s; killing it\n%s", e.tail())
		_ = e.cmd.Process.Kill()
		<-e.exited
		// A killed dockerd leaves its containerd behind; it keeps its pid in the exec root.
		if pid, err := os.ReadFile(filepath.Join(e.execDir, "containerd", "containerd.pid")); err == nil {
			var n int
			if _, err := fmt.Sscan(string(pid), &n); err == nil && n > 1 {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
	}
}

// unmountBelow detaches whatever a killed engine left mounted below the given directories
// (overlays, network namespaces), so they can be removed.
func (e *privateEngine) unmountBelow(dirs ...string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		for _, d := range dirs {
			if strings.HasPrefix(fields[4], d+"/") {
				points = append(points, fields[4])
			}
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

func (e *privateEngine) tail() string {
	data, _ := os.ReadFile(e.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// loadImage copies ref from the shared engine into the private one (image save and load),
// so the private engine needs no registry.
func (e *privateEngine) loadImage(ref string) {
	e.t.Helper()
	ctx := context.Background()
	home, _ := os.UserHomeDir()
	ep, err := engine.ResolveEndpoint(os.Getenv, home, "")
	if err != nil {
		e.t.Fatal(err)
	}
	shared, err := engine.Connect(ctx, ep, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer shared.Close()
	rc, err := shared.ImageSave(ctx, []string{ref})
	if err != nil {
		e.t.Fatalf("saving %s from the shared engine: %v", ref, err)
	}
	defer rc.Close()
	resp, err := e.cli.ImageLoad(ctx, rc, client.ImageLoadWithQuiet(true))
	if err != nil {
		e.t.Fatalf("loading %s into the private engine: %v", ref, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.cli.ImageInspect(ctx, ref); err != nil {
		e.t.Fatalf("%s after loading it: %v", ref, err)
	}
}

// The engine restarted under existing sandboxes: an exec in flight ends promptly and says
// why, the engine's absence is reported like any stopped engine, and after the restart ls
// still lists the sandboxes and exec brings them back.
func TestFaultEngineRestarted(t *testing.T) {
	sc := faultsGroup.start(t)
	enginetest.RealEngine(t) // the base image comes from the shared engine: skip (or fail in CI) without one
	e := startPrivateEngine(t)
	e.loadImage(baseImage)
	s := newSBXOn(t, e.cli, e.host)
	s.Write(".sbx.yaml", "image: "+baseImage+"\n")
	s.Trust()
	names := []string{sandboxName("restart-a"), sandboxName("restart-b")}
	for _, n := range names {
		if r := s.Run("exec", "-n", n, "--", "echo", "ok"); r.Code != 0 || r.Stdout != "ok\n" {
			t.Fatalf("exec on the private engine: %s", r)
		}
	}

	inflight := s.Cmd("exec", "-n", names[0], "--", "sleep", "4545")
	var stderr strings.Builder
	inflight.Stderr = &stderr
	if err := inflight.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { return len(s.Running(names[0], "sleep 4545")) == 1 })
	inflightDone := make(chan error, 1)
	go func() { inflightDone <- inflight.Wait() }()
	stopped := time.Now()
	e.stop()

	t.Run("an exec in flight ends promptly with an error", func(t *testing.T) {
		sc.case_(t)
		select {
		case err := <-inflightDone:
			var ee *exec.ExitError
			code := 0
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			// "error: ..." is how sbx explains a failure; a bare 137 would read as if the
			// command had been killed by someone inside.
			if code == 0 || !strings.Contains(stderr.String(), "error: ") {
				t.Errorf("exit %d after %s with stderr %q; want a failure that says the sandbox or engine went away",
					code, time.Since(stopped).Round(time.Millisecond), stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = inflight.Process.Kill()
			t.Errorf("the exec still hangs 30 s after the engine stopped")
		}
	})

	t.Run("while the engine is down", func(t *testing.T) {
		engineDownCases(t, sc, s.In(t), 5*time.Second)
	})

	e.start()
	t.Run("ls lists the sandboxes after the restart", func(t *testing.T) {
		sc.case_(t)
		r := s.In(t).Run("ls")
		for _, n := range names {
			if r.Code != 0 || !strings.Contains(r.Stdout, n) {
				t.Errorf("ls after the restart lacks %s: %s", n, r)
			}
		}
	})
	for _, n := range names {
		t.Run("exec after the restart on "+n, func(t *testing.T) {
			sc.case_(t)
			if r := s.In(t).Run("exec", "-n", n, "--", "echo", "ok"); r.Code != 0 || r.Stdout != "ok\n" {
				t.Errorf("exec after the restart: %s", r)
			}
		})
	}
}
