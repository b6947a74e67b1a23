package imagebuild_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/browser"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// imageTestRun labels every container these tests create.
var imageTestRun = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "img-" + hex.EncodeToString(b)
}()

// logEvents sends build progress to the test's log, a line per step.
func logEvents(t *testing.T) imagebuild.Progress {
	return func(ev imagebuild.Event) {
		switch e := ev.(type) {
		case imagebuild.Note:
			t.Log(strings.TrimRight(e.Text, "\n"))
		case imagebuild.StepStarted:
			t.Logf("[%d/%d] %s", e.Step, e.Steps, e.Instruction)
		case imagebuild.BuildDone:
			t.Logf("built %s in %s", e.Result.Tag, e.Result.Elapsed)
		case imagebuild.BuildFailed:
			if e.Err != nil {
				t.Log(e.Err.Summary())
			}
		}
	}
}

var buildMu sync.Mutex

// bundledImage returns the tag of a profile's image, building it when it is missing or stale.
// Current images are reused, so only the first run on a machine pays for the builds.
func bundledImage(t *testing.T, eng engine.Engine, profile string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	imgs := &imagebuild.Images{Engine: eng}
	st, err := imgs.Status(ctx, profile)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != imagebuild.ImagePresent {
		t.Logf("image %s is %s; building it", st.Tag, st.State)
		if _, err := imgs.Build(ctx, profile, imagebuild.BuildOptions{Progress: logEvents(t)}); err != nil {
			t.Fatalf("building %s: %v", st.Tag, err)
		}
	}
	return st.Tag
}

func TestBundledImagesBuild(t *testing.T) {
	eng := enginetest.RealEngine(t)
	for _, profile := range images.Profiles {
		bundledImage(t, eng, profile)
	}
	ctx := context.Background()
	list, err := (&imagebuild.Images{Engine: eng}).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range list {
		if st.State != imagebuild.ImagePresent || st.Size == 0 || st.Created.IsZero() || st.ImageHash != st.DockerfileHash {
			t.Errorf("%s after building: %+v", st.Profile, st)
		}
		img, err := eng.ImageInspect(ctx, st.Tag)
		if err != nil {
			t.Fatal(err)
		}
		cfg := img.Config
		labels := cfg.Labels
		if labels[imagebuild.LabelManaged] != "true" || labels[imagebuild.LabelProfile] != st.Profile || labels[imagebuild.LabelDockerfileHash] != st.DockerfileHash {
			t.Errorf("%s labels = %v", st.Tag, labels)
		}
		if cfg.User != "sandbox" || cfg.WorkingDir != "/workspace" || len(cfg.Volumes) != 0 {
			t.Errorf("%s: user %q, workdir %q, volumes %v; want sandbox, /workspace, none", st.Tag, cfg.User, cfg.WorkingDir, cfg.Volumes)
		}
		switch st.Profile {
		case images.ProfileBrowser:
			_, cdp := cfg.ExposedPorts["9222/tcp"]
			_, novnc := cfg.ExposedPorts["6080/tcp"]
			if !cdp || !novnc || !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/sbx-browser-entrypoint"}) {
				t.Errorf("%s: exposed %v, entrypoint %v", st.Tag, cfg.ExposedPorts, cfg.Entrypoint)
			}
		default:
			if !slices.Equal(cfg.Cmd, []string{"sleep", "infinity"}) {
				t.Errorf("%s: cmd %v, want sleep infinity", st.Tag, cfg.Cmd)
			}
		}
	}

	// A changed Dockerfile.sandbox, as a newer sbx would embed, makes all three stale.
	edited := enginetest.ImageFiles(t, map[string]string{"Dockerfile.sandbox": "RUN true\n"})
	stale, err := (&imagebuild.Images{Engine: eng, Files: edited}).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stale {
		if st.State != imagebuild.ImageStale {
			t.Errorf("%s with an edited Dockerfile.sandbox: %s, want stale", st.Profile, st.State)
		}
	}
}

// smokeBox is a container made the way sbx hardens sandboxes: read-only root, no
// capabilities, no new privileges, no network, an init, and tmpfs scratch space.
type smokeBox struct {
	t   *testing.T
	eng engine.Engine
	id  string
}

func startSmokeBox(t *testing.T, eng engine.Engine, tag string, env []string, cmd []string, mounts ...mount.Mount) *smokeBox {
	t.Helper()
	ctx := context.Background()
	init := true
	cfg := &container.Config{Image: tag, Env: env, Cmd: cmd, Labels: map[string]string{enginetest.TestLabel: imageTestRun}}
	host := &container.HostConfig{
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		NetworkMode:    "none",
		Init:           &init,
		Tmpfs: map[string]string{
			"/tmp":          "rw,nosuid,nodev,size=512m",
			"/home/sandbox": "rw,nosuid,nodev,exec,size=1g,uid=1000,gid=1000,mode=0755",
			"/workspace":    "rw,nosuid,nodev,exec,size=256m,uid=1000,gid=1000,mode=0755",
		},
		Resources: container.Resources{Memory: 2 << 30, PidsLimit: ptr(int64(1024))},
		Mounts:    mounts,
	}
	created, err := eng.ContainerCreate(ctx, cfg, host, &network.NetworkingConfig{}, nil, "")
	if err != nil {
		t.Fatalf("creating a container of %s: %v", tag, err)
	}
	t.Cleanup(func() {
		if err := eng.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("removing %s: %v", created.ID, err)
		}
		if err := enginetest.Sweep(context.Background(), eng, imageTestRun); err != nil {
			t.Errorf("sweep: %v", err)
		}
	})
	if err := eng.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("starting a container of %s: %v", tag, err)
	}
	return &smokeBox{t: t, eng: eng, id: created.ID}
}

func ptr[T any](v T) *T { return &v }

// run executes cmd in the box and returns its stdout, stderr and exit code.
func (b *smokeBox) run(env []string, cmd ...string) (string, string, int) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ex, err := b.eng.ContainerExecCreate(ctx, b.id, container.ExecOptions{Cmd: cmd, Env: env, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.t.Fatalf("exec %v: %v", cmd, err)
	}
	att, err := b.eng.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		b.t.Fatalf("attaching to %v: %v", cmd, err)
	}
	defer att.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		b.t.Fatalf("reading the output of %v: %v", cmd, err)
	}
	info, err := b.eng.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		b.t.Fatal(err)
	}
	return stdout.String(), stderr.String(), info.ExitCode
}

// must runs a shell script in the box and returns its combined output, failing the test
// when it exits non-zero.
func (b *smokeBox) must(env []string, script string) string {
	b.t.Helper()
	out, errOut, code := b.run(env, "bash", "-c", script)
	if code != 0 {
		b.t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", script, code, out, errOut)
	}
	return out + errOut
}

func TestSandboxImageSmoke(t *testing.T) {
	eng := enginetest.RealEngine(t)
	box := startSmokeBox(t, eng, bundledImage(t, eng, images.ProfileSandbox), nil, nil)

	if out := box.must(nil, "python3 --version"); !strings.HasPrefix(out, "Python 3.") {
		t.Errorf("python3 --version: %q", out)
	}
	box.must(nil, "for c in bash curl git jq rg ps tar sha256sum; do command -v $c >/dev/null || { echo missing $c; exit 1; }; done")
	checks := map[string]string{
		"id -u; id -g":                        "1000\n1000\n",
		"pwd":                                 "/workspace\n",
		"stat -c %U /workspace /home/sandbox": "sandbox\nsandbox\n",
		"ls -A /var/lib/apt/lists | wc -l":    "0\n",
		// Nothing left that could raise privileges if no-new-privileges were ever off.
		"find / -xdev -type f -perm /6000 2>/dev/null | wc -l": "0\n",
		"cat /etc/passwd | grep ^sandbox: | cut -d: -f6,7":     "/home/sandbox:/usr/sbin/nologin\n",
	}
	for script, want := range checks {
		if got := box.must(nil, script); got != want {
			t.Errorf("%s = %q, want %q", script, got, want)
		}
	}
	if _, _, code := box.run(nil, "touch", "/etc/x"); code == 0 {
		t.Error("the root file system is writable")
	}
}

func TestCommonImageSmoke(t *testing.T) {
	eng := enginetest.RealEngine(t)
	box := startSmokeBox(t, eng, bundledImage(t, eng, images.ProfileCommon), nil, nil)

	for cmd, want := range map[string]string{
		"node --version":  "v",
		"npm --version":   "",
		"go version":      "go version go1.",
		"rustc --version": "rustc 1.",
		"cargo --version": "cargo 1.",
		"javac -version":  "javac ",
		"java -version":   "openjdk version",
		"gcc --version":   "gcc ",
		"pkg-config --version; unzip -v; file --version; wget --version": "",
	} {
		if out := box.must(nil, cmd); !strings.HasPrefix(out, want) {
			t.Errorf("%s: %q, want it to start with %q", cmd, out, want)
		}
	}

	// The toolchains work under the read-only root once their caches and temp dirs point
	// at the home tmpfs, as the common profile sets them.
	env := []string{"HOME=/home/sandbox", "GOCACHE=/home/sandbox/.cache/go-build", "GOPATH=/home/sandbox/go",
		"GOTMPDIR=/home/sandbox/.cache/go-tmp", "GOTOOLCHAIN=local", "CARGO_HOME=/home/sandbox/.cargo",
		"npm_config_cache=/home/sandbox/.npm", "TMPDIR=/home/sandbox/.cache/tmp"}
	script := `set -e
mkdir -p "$GOTMPDIR" "$TMPDIR"
mkdir hello-go && cd hello-go && go mod init example.com/hello >/dev/null 2>&1
printf 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello from go") }\n' >main.go
go run .
cd /workspace && cargo new --quiet hello-rust && cd hello-rust && cargo run --quiet
cd /workspace && printf 'class Hello { public static void main(String[] a) { System.out.println("hello from java"); } }\n' >Hello.java
javac Hello.java && java Hello
node -e 'console.log("hello from node")'
cd /workspace && mkdir hello-npm && cd hello-npm && npm init -y >/dev/null && echo npm ok`
	out := box.must(env, script)
	for _, want := range []string{"hello from go", "Hello, world!", "hello from java", "hello from node", "npm ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("toolchain output lacks %q:\n%s", want, out)
		}
	}
}

func TestBrowserImageSmoke(t *testing.T) {
	eng := enginetest.RealEngine(t)
	tag := bundledImage(t, eng, images.ProfileBrowser)
	// The relay in front of the ports is sbx's binary, as sbx browser mounts it, with a token.
	const token = "00112233445566778899aabbccddeeff0011223344556677"
	relay := []string{browser.TokenEnv + "=" + token, browser.RelayEnv + "=" + browser.RelayPath}
	bin := mount.Mount{Type: mount.TypeBind, Source: testenv.SbxBinary(t), Target: browser.RelayPath, ReadOnly: true}

	t.Run("headless", func(t *testing.T) {
		box := startSmokeBox(t, eng, tag, append([]string{"SBX_BROWSER_HEADLESS=1"}, relay...), nil, bin)
		if out := box.must(nil, "chromium --version"); !strings.HasPrefix(out, "Chromium ") {
			t.Errorf("chromium --version: %q", out)
		}
		// The DevTools endpoint answers on 9222 through the relay, with the token only.
		version := box.waitFor(t, "http://127.0.0.1:9222/"+token+"/json/version")
		if !strings.Contains(version, `"webSocketDebuggerUrl"`) || !strings.Contains(version, "HeadlessChrome") {
			t.Errorf("/json/version: %s", version)
		}
		if out := box.must(nil, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9222/json/version"); out != "401" {
			t.Errorf("/json/version without the token: %s", out)
		}
		if _, _, code := box.run(nil, "curl", "-sf", "-o", "/dev/null", "http://127.0.0.1:6080/"); code == 0 {
			t.Error("noVNC answers in headless mode")
		}
	})

	t.Run("desktop", func(t *testing.T) {
		box := startSmokeBox(t, eng, tag, append([]string{"SBX_VNC_PASSWORD=test-pw"}, relay...), nil, bin)
		version := box.waitFor(t, "http://127.0.0.1:9222/"+token+"/json/version")
		if !strings.Contains(version, `"Browser": "Chrome/`) || strings.Contains(version, "HeadlessChrome") {
			t.Errorf("/json/version: %s", version)
		}
		if page := box.waitFor(t, "http://127.0.0.1:6080/"+token+"/vnc.html"); !strings.Contains(page, "noVNC") {
			t.Errorf("noVNC page: %.200s", page)
		}
		if out := box.must(nil, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:6080/vnc.html"); out != "401" {
			t.Errorf("noVNC without the token: %s", out)
		}
		// VNC itself listens on loopback only; the password file is gone once read.
		out := box.must(nil, "cat /proc/net/tcp | awk '$2 ~ /:170C$/ && $4 == \"0A\" {print $2}'; ls /tmp/sbx-browser.*/")
		if !strings.Contains(out, "0100007F:170C") || strings.Contains(out, "00000000:170C") || strings.Contains(out, "vncpass") {
			t.Errorf("VNC listeners and run dir:\n%s", out)
		}
	})

	// Without its relay or a token, nothing may listen beyond loopback.
	for what, env := range map[string][]string{
		"desktop without a password": relay,
		"headless without a token":   {"SBX_BROWSER_HEADLESS=1", browser.RelayEnv + "=" + browser.RelayPath},
		"headless without the relay": {"SBX_BROWSER_HEADLESS=1", browser.TokenEnv + "=" + token},
	} {
		t.Run(what+" refuses to start", func(t *testing.T) { refusesToStart(t, eng, tag, env, bin) })
	}
}

// refusesToStart checks that a box of the browser image with env exits with status 64.
func refusesToStart(t *testing.T, eng engine.Engine, tag string, env []string, bin mount.Mount) {
	box := startSmokeBox(t, eng, tag, env, nil, bin)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := eng.ContainerInspect(context.Background(), box.id)
		if err != nil {
			t.Fatal(err)
		}
		if !info.State.Running {
			if info.State.ExitCode != 64 {
				t.Errorf("exit code %d, want 64", info.State.ExitCode)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the browser started with only %v", env)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFor polls url from inside the box until it answers, for up to 30 s, and returns the body.
func (b *smokeBox) waitFor(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, errOut, code := b.run(nil, "curl", "-sf", "--max-time", "2", url)
		if code == 0 {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within 30 s (curl exit %d: %s)", url, code, errOut)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestMain removes the sbx binary the browser's smoke test built for its relay.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveSbxBinary()
	os.Exit(code)
}
