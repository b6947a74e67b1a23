package cmd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// remote is an ssh:// engine for a test: a private dockerd in mount and network namespaces
// of its own, where the machine's temporary directory (the project, sbx's state) is an empty
// tmpfs, behind Debian's sshd on a loopback port that lets root in with a key the test made.
type remote struct {
	dir    string
	port   string
	socket string         // the private engine's socket, as the ssh session's docker uses it
	eng    *client.Client // the private engine, for the test's own checks and cleanup
}

// host is the endpoint sbx is given.
func (r *remote) host() string { return "ssh://root@127.0.0.1:" + r.port }

func startRemote(t *testing.T) *remote {
	t.Helper()
	testenv.RequireRoot(t, "a private dockerd and sshd")
	for _, tool := range []string{"sshd", "ssh-keygen", "dockerd", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "SBX_REQUIRE_DOCKER", "%s is not installed (scripts/test-env.sh installs sshd): %v", tool, err)
		}
	}
	local, ok := enginetest.RealEngine(t).(*client.Client)
	if !ok {
		t.Fatal("the real engine is not a Docker client")
	}
	// Outside the temporary directory, which the private engine's namespace hides.
	if err := os.MkdirAll("/var/lib/sbx-test", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/var/lib/sbx-test", "ssh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r := &remote{dir: dir, socket: filepath.Join(dir, "engine.sock")}
	r.startEngine(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	saved, err := local.ImageSave(ctx, []string{"debian:bookworm-slim", images.SandboxTag})
	if err != nil {
		t.Fatalf("saving the images for the private engine: %v", err)
	}
	defer saved.Close()
	loaded, err := r.eng.ImageLoad(ctx, saved)
	if err != nil {
		t.Fatalf("loading the images into the private engine: %v", err)
	}
	_, _ = io.Copy(io.Discard, loaded.Body)
	_ = loaded.Body.Close()

	for _, key := range []string{"host", "host-other", "user", "user-other", "user-nodocker"} {
		r.run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key, "-f", r.path(key))
	}
	// The second key's session has no docker on its PATH, as on a host without docker.
	authorized := r.read(t, "user.pub") +
		`command="PATH=/nonexistent /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"" ` + r.read(t, "user-nodocker.pub")
	r.write(t, "authorized_keys", authorized, 0o600)
	r.startSSHD(t)
	return r
}

func (r *remote) path(name string) string { return filepath.Join(r.dir, name) }

func (r *remote) run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func (r *remote) read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(r.path(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func (r *remote) write(t *testing.T, name, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(r.path(name), []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// startEngine starts the private dockerd and waits until it answers.
func (r *remote) startEngine(t *testing.T) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	if !strings.HasPrefix(t.TempDir(), tmp+"/") {
		t.Fatalf("the test's directories are not under %s, which the private engine hides", tmp)
	}
	cmd := exec.Command("unshare", "--mount", "--net", "--propagation", "private", "sh", "-ec",
		`mount -t tmpfs tmpfs "$1"; shift; exec "$@"`, "sh", tmp,
		"dockerd", "--data-root", r.path("data"), "--exec-root", r.path("exec"), "--pidfile", r.path("dockerd.pid"),
		"-H", "unix://"+r.socket, "--bridge=none", "--iptables=false", "--ip6tables=false",
		// Namespaces of its own should it find the system's containerd (test/adversarial's
		// private engine does the same).
		"--containerd-namespace", "sbx-ssh-"+filepath.Base(r.dir), "--containerd-plugins-namespace", "sbx-ssh-"+filepath.Base(r.dir)+"-plugins")
	// Its own process group, so a signal meant for the test run does not reach it directly,
	// and TERM when the test process dies (a timeout panic skips the cleanups).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	logf, err := os.Create(r.path("dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the private dockerd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	r.eng, err = client.NewClientWithOpts(client.WithHost("unix://"+r.socket), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.eng.Close() })
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := r.eng.Ping(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("the private dockerd ended: %v\n%s", err, r.read(t, "dockerd.log"))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private dockerd did not answer within a minute: %v\n%s", err, r.read(t, "dockerd.log"))
		}
	}
}

// startSSHD starts sshd on a free loopback port, trying another when one is taken between
// choosing it and sshd binding it, and waits until it listens.
func (r *remote) startSSHD(t *testing.T) {
	t.Helper()
	// sshd insists on its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, r.port, _ = net.SplitHostPort(l.Addr().String())
		_ = l.Close()
		r.write(t, "sshd_config", fmt.Sprintf(`Port %s
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
SetEnv DOCKER_HOST=unix://%s
`, r.port, r.path("host"), r.path("sshd.pid"), r.path("authorized_keys"), r.socket), 0o600)
		cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", r.path("sshd_config"))
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting sshd: %v", err)
		}
		var log strings.Builder
		sc := bufio.NewScanner(stderr)
		listening := false
		for sc.Scan() {
			fmt.Fprintln(&log, sc.Text())
			if strings.Contains(sc.Text(), "Server listening on") {
				listening = true
				break
			}
		}
		if !listening {
			_ = cmd.Wait()
			if strings.Contains(log.String(), "Address already in use") {
				continue
			}
			t.Fatalf("sshd did not start:\n%s", log.String())
		}
		go func() { _, _ = io.Copy(io.Discard, stderr) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		r.write(t, "known_hosts", fmt.Sprintf("[127.0.0.1]:%s %s", r.port, r.read(t, "host.pub")), 0o644)
		r.write(t, "known_hosts-other", fmt.Sprintf("[127.0.0.1]:%s %s", r.port, r.read(t, "host-other.pub")), 0o644)
		return
	}
	t.Fatal("sshd found no free port in 5 tries")
}

// sshPath is a directory to put first on sbx's PATH, whose ssh is the system's with a config
// that logs in with key and checks the host against knownHosts, and with nothing of the
// user's (agent, ~/.ssh) taking part.
func (r *remote) sshPath(t *testing.T, key, knownHosts string) string {
	t.Helper()
	bin := r.path("bin-" + key + "-" + knownHosts)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(bin, "ssh_config")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`Host *
  IdentityFile %s
  IdentitiesOnly yes
  IdentityAgent none
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
`, r.path(key), r.path(knownHosts))), 0o644); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec /usr/bin/ssh -F %s \"$@\"\n", config)
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// newRemoteCLI is sbx for t against r's engine through ssh, with key and knownHosts.
func newRemoteCLI(t *testing.T, r *remote, key, knownHosts string) *cli {
	t.Helper()
	c := &cli{clitest.New(t, cliRun, r.eng, r.host())}
	c.Env = append(c.Env, "PATH="+r.sshPath(t, key, knownHosts)+":"+os.Getenv("PATH"))
	return c
}

// localContainers counts the containers of label on the machine's own engine.
func localContainers(t *testing.T, label string) int {
	t.Helper()
	list, err := enginetest.RealEngine(t).ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+label))})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// TestCLISSHEngine reaches a private engine through ssh://, as the docker CLI does, and fails
// clearly, with exit 125, where ssh or the remote side cannot.
func TestCLISSHEngine(t *testing.T) {
	r := startRemote(t)
	before := localContainers(t, cliRun)

	c := newRemoteCLI(t, r, "user", "known_hosts")
	name := cliRun + "-ssh"
	if res := c.Run("create", "-n", name, "--workspace", "none"); res.Code != 0 {
		t.Fatalf("create through ssh: %s", res)
	}
	if res := c.Run("exec", "-n", name, "--", "sh", "-c", "echo out; echo err >&2; exit 3"); res.Code != 3 || res.Stdout != "out\n" || !strings.Contains(res.Stderr, "err\n") {
		t.Fatalf("exec through ssh: %s", res)
	}
	// Exact streams both ways: stdin reaches its end through ssh's half-close.
	in := "a\x00b\r\n\xff" + strings.Repeat("x", 1<<20)
	cat := c.Cmd("exec", "-i", "-n", name, "--", "cat")
	cat.Stdin = strings.NewReader(in)
	if res := c.RunIn(cat); res.Code != 0 || res.Stdout != in {
		t.Fatalf("stdin through ssh: exit %d, %d bytes back of %d\nstderr: %q", res.Code, len(res.Stdout), len(in), res.Stderr)
	}
	if res := c.Run("exec", "-n", name, "--timeout", "2s", "--", "sh", "-c", "sleep 100 & sleep 100"); res.Code != 124 || !strings.Contains(res.Stderr, "timed out after 2s") {
		t.Fatalf("timeout through ssh: %s", res)
	}
	if s := c.sleepers(name); s != "" {
		t.Fatalf("left running after the timeout:\n%s", s)
	}
	// sbx killed mid-command takes its ssh with it; the engine then ends the exec's input,
	// and the command's watchdog ends it.
	kill := c.Cmd("exec", "-n", name, "--", "sh", "-c", "echo started; sleep 100 & sleep 100")
	stdout, err := kill.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := kill.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
		t.Fatalf("the command did not start: %q, %v", line, err)
	}
	_ = kill.Process.Kill()
	_ = kill.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for s := c.sleepers(name); s != ""; s = c.sleepers(name) {
		if time.Now().After(deadline) {
			t.Fatalf("left running 30s after sbx was killed:\n%s", s)
		}
	}

	list, err := r.eng.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+cliRun))})
	if err != nil || len(list) == 0 {
		t.Fatalf("no sandbox on the private engine: %v", err)
	}
	if after := localContainers(t, cliRun); after != before {
		t.Fatalf("the local engine changed: %d containers of this run before, %d after", before, after)
	}

	// A docker context names the same engine: --context and SBX_CONTEXT beat DOCKER_HOST,
	// here a socket nobody listens on, and ls --all-contexts lists each context's sandboxes.
	sum := sha256.Sum256([]byte("remote"))
	meta := filepath.Join(c.Home, ".docker", "contexts", "meta", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(meta, "meta.json"), []byte(`{"Name":"remote","Metadata":{},"Endpoints":{"docker":{"Host":"`+r.host()+`"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Env = append(c.Env, "DOCKER_HOST=unix://"+filepath.Join(r.dir, "nobody.sock"))
	if res := c.Run("--context", "remote", "ls", "-q"); res.Code != 0 || res.Stdout != name+"\n" {
		t.Fatalf("ls --context remote: %s", res)
	}
	env := c.Env
	c.Env = append(env, "SBX_CONTEXT=remote")
	if res := c.Run("exec", "-n", name, "--", "echo", "via SBX_CONTEXT"); res.Code != 0 || res.Stdout != "via SBX_CONTEXT\n" {
		t.Fatalf("exec with SBX_CONTEXT: %s", res)
	}
	c.Env = env
	if res := c.Run("ls", "--all-contexts"); res.Code != 0 || !strings.Contains(res.Stdout, "remote\t"+name+"\t") || !strings.Contains(res.Stderr, "warning: context default: cannot reach the Docker engine") {
		t.Fatalf("ls --all-contexts: %s", res)
	}

	for _, tt := range []struct {
		name, key, knownHosts, message, hint string
	}{
		{"wrong host key", "user", "known_hosts-other", "the host's key does not match the one in known_hosts", "ssh-keygen -R 127.0.0.1"},
		{"wrong key", "user-other", "known_hosts", "authentication failed: root@127.0.0.1: Permission denied (publickey)", "ssh-add"},
		{"no docker", "user-nodocker", "known_hosts", "the remote host has no docker command", "install the docker CLI on 127.0.0.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newRemoteCLI(t, r, tt.key, tt.knownHosts)
			res := c.Run("ls")
			if res.Code != 125 || !strings.Contains(res.Stderr, "cannot reach the Docker engine at "+r.host()) ||
				!strings.Contains(res.Stderr, tt.message) || !strings.Contains(res.Stderr, "hint: ") || !strings.Contains(res.Stderr, tt.hint) {
				t.Fatalf("want exit 125 saying %q with a hint naming %q: %s", tt.message, tt.hint, res)
			}
		})
	}
}

// TestCLISSHCarriedWorkspace works on a project the remote engine cannot see: sbx copies it
// into the sandbox, without what workspaceExclude leaves out, and brings the sandbox's
// changes back only through sbx apply.
func TestCLISSHCarriedWorkspace(t *testing.T) {
	r := startRemote(t)
	before := localContainers(t, cliRun)
	c := newRemoteCLI(t, r, "user", "known_hosts")
	name := cliRun + "-carry"
	c.Write("hello.txt", "from the project\n")
	c.Write("keep.txt", "keep me\n")
	c.Write("both.txt", "carried\n")
	c.Write("node_modules/dep.js", "left out\n")
	c.Write(".sbx.yaml", "workspaceExclude:\n  - node_modules/\n")
	snap := clitest.Snapshot(t, c.Project)

	if res := c.Run("create", "-n", name); res.Code != 0 || !strings.Contains(res.Stderr, "copied the project into sandbox") {
		t.Fatalf("create: %s", res)
	}
	if res := c.Run("ls", "--json"); res.Code != 0 || !strings.Contains(compactJSON(t, res.Stdout), `"workspace":{"mode":"ro","path":"`+c.Project+`","carriage":"copy"}`) {
		t.Fatalf("ls does not say the workspace is a copy: %s", res)
	}
	if res := c.Run("explain", name); res.Code != 0 || !strings.Contains(res.Stdout, "workspace: a copy of the project in the sandbox's volume") {
		t.Fatalf("explain does not say the workspace is a copy: %s", res)
	}
	if res := c.Run("exec", "-n", name, "--", "cat", "hello.txt"); res.Code != 0 || res.Stdout != "from the project\n" {
		t.Fatalf("cat of a project file: %s", res)
	}
	if res := c.Run("exec", "-n", name, "--", "sh", "-c", "test ! -e /workspace/node_modules"); res.Code != 0 {
		t.Fatalf("an excluded directory reached the sandbox: %s", res)
	}
	if res := c.Run("exec", "-n", name, "--", "sh", "-ec", "echo edited >> hello.txt; echo new > new.txt; rm keep.txt"); res.Code != 0 {
		t.Fatalf("editing inside: %s", res)
	}
	if after := clitest.Snapshot(t, c.Project); !maps.Equal(snap, after) {
		t.Fatalf("the project changed before apply:\nbefore %v\nafter  %v", snap, after)
	}
	if res := c.Run("diff", "-n", name, "--name-only"); res.Code != 0 || res.Stdout != "hello.txt\nkeep.txt\nnew.txt\n" {
		t.Fatalf("diff: %s\nend of stderr: %s", res, res.Stderr[max(0, len(res.Stderr)-500):])
	}
	if res := c.Run("apply", "-n", name); res.Code != 0 {
		t.Fatalf("apply: %s", res)
	}
	for file, want := range map[string]string{"hello.txt": "from the project\nedited\n", "new.txt": "new\n"} {
		if got, err := os.ReadFile(filepath.Join(c.Project, file)); err != nil || string(got) != want {
			t.Errorf("%s after apply: %q, %v; want %q", file, got, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(c.Project, "keep.txt")); !os.IsNotExist(err) {
		t.Errorf("keep.txt after apply: %v, want it deleted", err)
	}
	if res := c.Run("diff", "-n", name, "--name-only"); res.Code != 0 || res.Stdout != "" {
		t.Fatalf("diff after apply: %s", res)
	}

	// Later host changes go over with sync, but for a path the sandbox changed too.
	c.Write("later.txt", "later\n")
	c.Write("new.txt", "new, from the host\n")
	c.Write("both.txt", "host\n")
	if err := os.Remove(filepath.Join(c.Project, "hello.txt")); err != nil {
		t.Fatal(err)
	}
	if res := c.Run("exec", "-n", name, "--", "sh", "-ec", "echo sandbox > both.txt"); res.Code != 0 {
		t.Fatalf("editing inside: %s", res)
	}
	if res := c.Run("sync", "-n", name, "--json"); res.Code != 1 || compactJSON(t, res.Stdout) != `{"sent":["later.txt","new.txt"],"removed":["hello.txt"],"kept":["both.txt"]}` {
		t.Fatalf("sync: %s", res)
	}
	if res := c.Run("exec", "-n", name, "--", "sh", "-c", "cat later.txt new.txt both.txt; test ! -e hello.txt"); res.Code != 0 || res.Stdout != "later\nnew, from the host\nsandbox\n" {
		t.Fatalf("the sandbox after sync: %s", res)
	}
	if res := c.Run("sync", "-n", name, "--json"); res.Code != 1 || compactJSON(t, res.Stdout) != `{"sent":[],"removed":[],"kept":["both.txt"]}` {
		t.Fatalf("a second sync: %s", res)
	}
	if after := localContainers(t, cliRun); after != before {
		t.Fatalf("the local engine changed: %d containers of this run before, %d after", before, after)
	}
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return "not JSON: " + s
	}
	return b.String()
}
