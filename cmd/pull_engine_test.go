package cmd

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"

	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// testRegistry is Debian's docker-registry on a loopback port, with basic auth from an
// htpasswd file the test makes. The engine allows plain HTTP to 127.0.0.0/8 registries.
type testRegistry struct {
	Addr string // 127.0.0.1:PORT
	Log  *syncBuffer
}

// syncBuffer is the registry's log, written by the goroutine that copies its output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const registryUser, registryPassword = "sbxtest", "pull-s3cret"

func startRegistry(t *testing.T) *testRegistry {
	t.Helper()
	for _, tool := range []string{"docker-registry", "htpasswd"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "SBX_REQUIRE_DOCKER", "%s is not installed (scripts/test-env.sh installs it): %v", tool, err)
		}
	}
	dir := t.TempDir()
	hash, err := exec.Command("htpasswd", "-Bbn", registryUser, registryPassword).Output()
	if err != nil {
		t.Fatalf("htpasswd: %v", err)
	}
	writeFile(t, filepath.Join(dir, "htpasswd"), string(hash))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	writeFile(t, filepath.Join(dir, "config.yml"), fmt.Sprintf(`version: 0.1
log: {level: info}
storage: {filesystem: {rootdirectory: %s}}
http: {addr: %s}
auth: {htpasswd: {realm: sbx-test, path: %s}}
`, filepath.Join(dir, "data"), addr, filepath.Join(dir, "htpasswd")))
	reg := &testRegistry{Addr: addr, Log: &syncBuffer{}}
	cmd := exec.Command("docker-registry", "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = reg.Log, reg.Log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Ready once it answers: 401 without credentials.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return reg
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry did not answer on %s within 30s (%v); its log:\n%s", addr, err, reg.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// dockerConfig writes a Docker config directory whose auths hold user:password for addr.
func dockerConfig(t *testing.T, addr, user, password string) string {
	t.Helper()
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	writeFile(t, filepath.Join(dir, "config.json"), fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, addr, auth))
	return dir
}

// drain reads an engine stream to its end and fails on an error message in it.
func drain(t *testing.T, what string, rc io.ReadCloser) {
	t.Helper()
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var msg struct{ Error string }
		if err := dec.Decode(&msg); err == io.EOF {
			return
		} else if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if msg.Error != "" {
			t.Fatalf("%s: %s", what, msg.Error)
		}
	}
}

// A project's image that the engine lacks is pulled from a registry on loopback with the
// credentials of the Docker config DOCKER_CONFIG names, with progress, and runs; a wrong
// password and no credentials fail naming the registry, why and what to do.
func TestCLIPullFromRegistry(t *testing.T) {
	eng, ok := enginetest.RealEngine(t).(*client.Client)
	if !ok {
		t.Fatal("the engine is not the Docker client")
	}
	reg := startRegistry(t)
	ref := reg.Addr + "/sbxtest/slim:" + strings.ToLower(strings.ReplaceAll(cliRun, "_", "-"))
	// Removed once the sandbox is (cleanups run last first): an image in use stays.
	t.Cleanup(func() {
		if _, err := eng.ImageRemove(context.Background(), ref, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing %s: %v", ref, err)
		}
	})
	c := newCLI(t)
	ctx := context.Background()
	if err := eng.ImageTag(ctx, baseImage, ref); err != nil {
		t.Fatal(err)
	}
	authJSON, _ := json.Marshal(registry.AuthConfig{Username: registryUser, Password: registryPassword, ServerAddress: reg.Addr})
	rc, err := eng.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: base64.URLEncoding.EncodeToString(authJSON)})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, "pushing "+ref, rc)
	if _, err := eng.ImageRemove(ctx, ref, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Write(".sbx.yaml", "image: "+ref+"\n")
	c.Trust()

	name := cliRun + "-pull"
	exec := func(config string) (code int, stdout, stderr string) {
		cmd := c.Cmd("exec", "-n", name, "--", "cat", "/etc/debian_version")
		cmd.Env = append(cmd.Env, "DOCKER_CONFIG="+config)
		r := c.RunIn(cmd)
		return r.Code, r.Stdout, r.Stderr
	}
	code, _, stderr := exec(dockerConfig(t, reg.Addr, registryUser, "wrong"))
	t.Logf("a wrong password, on stderr:\n%s", stderr)
	if code != 125 || !strings.Contains(stderr, "pulling image "+ref+" from registry "+reg.Addr+": the registry refused the credentials from auths in ") ||
		!strings.Contains(stderr, "hint: log in with: docker login "+reg.Addr) {
		t.Errorf("a wrong password: exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = exec(t.TempDir())
	if code != 125 || !strings.Contains(stderr, "from registry "+reg.Addr+": the registry wants credentials and the Docker config has none for it") {
		t.Errorf("no credentials: exit %d, stderr:\n%s", code, stderr)
	}
	if _, err := eng.ImageInspect(ctx, ref); err == nil {
		t.Fatalf("%s is on the engine after failed pulls", ref)
	}

	before := len(reg.Log.String())
	code, stdout, stderr := exec(dockerConfig(t, reg.Addr, registryUser, registryPassword))
	if code != 0 || !strings.HasPrefix(stdout, "12.") {
		t.Fatalf("pull and exec: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	t.Logf("the pull, on stderr:\n%s", stderr)
	if !strings.Contains(stderr, "pulling "+ref+" from "+reg.Addr+" (with credentials from auths in ") ||
		!strings.Contains(stderr, "\npulled "+ref+" (sha256:") {
		t.Errorf("the pull's progress:\n%s", stderr)
	}
	if pulled := reg.Log.String()[before:]; !strings.Contains(pulled, `msg="authorized request"`) || !strings.Contains(pulled, "http.request.uri=/v2/sbxtest/slim/manifests/") {
		t.Errorf("the registry saw no authorized request for the image's manifest:\n%s", pulled)
	}
	// Present now: the next exec pulls nothing.
	if code, _, stderr = exec(t.TempDir()); code != 0 || strings.Contains(stderr, "pulling") {
		t.Errorf("second exec: exit %d, stderr:\n%s", code, stderr)
	}
}

// baseImage is the image the test environment provides (scripts/test-env.sh).
const baseImage = "debian:bookworm-slim"
