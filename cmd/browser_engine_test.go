package cmd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/cmd/browser"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// These acceptance tests of issue 6 run against the real engine, like engine_test.go.

const allowBrowser = "tools: {allow: [exec, read, write, browser], deny: []}\n"

// loopbackGet fetches a URL on 127.0.0.1 without any proxy, returning status and body.
func loopbackGet(t *testing.T, raw string) (int, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("%q is not a URL on 127.0.0.1", raw)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(raw)
	if err != nil {
		t.Fatalf("GET %s: %v", raw, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

// onlyLoopback checks the engine's own record of a sandbox's published ports: exactly the
// wanted container ports, each bound on 127.0.0.1 alone.
func onlyLoopback(t *testing.T, eng engine.Engine, name string, want ...string) {
	t.Helper()
	info, err := eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for port, bindings := range info.NetworkSettings.Ports {
		if len(bindings) > 0 {
			got = append(got, string(port))
		}
		for _, b := range bindings {
			if b.HostIP != "127.0.0.1" || b.HostPort == "" {
				t.Errorf("%s is bound on %s:%s, want 127.0.0.1 only", port, b.HostIP, b.HostPort)
			}
		}
	}
	for port, bindings := range info.HostConfig.PortBindings {
		for _, b := range bindings {
			if b.HostIP != "127.0.0.1" {
				t.Errorf("%s is requested on %q, want 127.0.0.1", port, b.HostIP)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || info.HostConfig.PublishAllPorts {
		t.Errorf("published %v (publish all %v), want %v", got, info.HostConfig.PublishAllPorts, want)
	}
}

// newBrowserCLI is newCLI with a trusted project file that allows the browser tool, and the
// current browser image.
func newBrowserCLI(t *testing.T) *cli {
	t.Helper()
	c := newCLI(t)
	currentBrowserImage(t, c.Eng)
	c.Write(".sbx.yaml", allowBrowser)
	c.Trust()
	return c
}

// startHeadless runs "sbx browser -n name --headless --json" and returns its result and the
// DevTools endpoint it printed.
func startHeadless(t *testing.T, c *cli, name string) (browser.Result, *url.URL) {
	t.Helper()
	r := c.Run("browser", "-n", name, "--headless", "--json")
	if r.Code != 0 {
		t.Fatalf("sbx browser --headless: %s", r)
	}
	var res browser.Result
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, r.Stdout)
	}
	cdp, err := url.Parse(res.Endpoints.CDP.URL)
	if err != nil {
		t.Fatalf("cdp endpoint %q: %v", res.Endpoints.CDP.URL, err)
	}
	return res, cdp
}

// cdpBase is the HTTP root of the DevTools endpoint res printed, behind its token.
func cdpBase(res browser.Result, cdp *url.URL) string {
	return "http://" + cdp.Host + "/" + res.Token
}

// currentBrowserImage rebuilds the browser image when it is missing or stale: sbx browser
// would use a stale one with a warning, and these tests check what the current one does.
func currentBrowserImage(t *testing.T, eng engine.Engine) {
	t.Helper()
	imgs := &imagebuild.Images{Engine: eng}
	st, err := imgs.Status(context.Background(), images.ProfileBrowser)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != imagebuild.ImagePresent {
		t.Logf("image %s is %s; building it", st.Tag, st.State)
		if _, err := imgs.Build(context.Background(), images.ProfileBrowser, imagebuild.BuildOptions{}); err != nil {
			t.Fatalf("building %s: %v", st.Tag, err)
		}
	}
}

func TestCLIBrowserHeadless(t *testing.T) {
	c := newBrowserCLI(t)
	name := cliRun + "-chrome"
	res, cdp := startHeadless(t, c, name)
	if !res.Headless || res.Endpoints.NoVNC != nil || res.Name != name {
		t.Errorf("result %+v", res)
	}
	if cdp.Scheme != "ws" || cdp.Hostname() != "127.0.0.1" || len(res.Token) != 48 || !strings.HasPrefix(cdp.Path, "/"+res.Token+"/devtools/browser/") {
		t.Fatalf("cdp endpoint %q", res.Endpoints.CDP.URL)
	}
	status, body := loopbackGet(t, cdpBase(res, cdp)+"/json/version")
	var version struct {
		Browser string `json:"Browser"`
		WS      string `json:"webSocketDebuggerUrl"`
	}
	if err := json.Unmarshal([]byte(body), &version); status != 200 || err != nil || !strings.Contains(version.Browser, "Chrome/") {
		t.Errorf("/json/version from the host: %d %s", status, body)
	}
	if ws, _ := url.Parse(version.WS); ws == nil || ws.Path != cdp.Path {
		t.Errorf("printed %s, Chromium names %s", res.Endpoints.CDP.URL, version.WS)
	}
	onlyLoopback(t, c.Eng, name, "9222/tcp")
	// The browser image's entrypoint runs the agent once Chromium is up.
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", "echo $PPID"); r.Code != 0 || strings.TrimSpace(r.Stdout) == "0" {
		t.Errorf("exec in the browser sandbox, want it through the agent (a parent pid): exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	// Only the agent gets its source back from the entrypoint.
	env := `n=0; for p in $(pgrep -x chromium); do tr '\0' '\n' <"/proc/$p/environ" | grep -q '^SBX_AGENT=' && n=$((n+1)); done; echo "$(pgrep -xc chromium) $n"`
	if r := c.Run("exec", "-n", name, "--", "bash", "-c", env); r.Code != 0 || !strings.HasSuffix(strings.TrimSpace(r.Stdout), " 0") || strings.HasPrefix(r.Stdout, "0 ") {
		t.Errorf("chromium processes and how many hold SBX_AGENT: %q (stderr %q)", r.Stdout, r.Stderr)
	}

	r := c.Run("ls", "--json", "--filter", "name="+name)
	if !strings.Contains(r.Stdout, `"127.0.0.1:`+cdp.Port()+`->9222/tcp"`) {
		t.Errorf("ls does not show the port:\n%s", r.Stdout)
	}
	if r = c.Run("browser", "-n", name, "--headless"); r.Code != 125 || !strings.Contains(r.Stderr, "sbx rm -f "+name) {
		t.Errorf("a second browser of the same name: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

func TestCLIBrowserDesktop(t *testing.T) {
	c := newBrowserCLI(t)
	r := c.Run("browser")
	if r.Code != 0 {
		t.Fatalf("sbx browser: exit %d\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
	var name string
	for _, l := range strings.Split(c.Run("ls", "-q", "--filter", "project="+c.Project).Stdout, "\n") {
		if strings.HasSuffix(l, "-browser") {
			name = l
		}
	}
	if name == "" {
		t.Fatal("no sandbox named after the project with -browser")
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n")[1:] {
		f := strings.Split(l, "\t")
		rows[f[0]] = f[1:]
	}
	novnc, ok := rows["novnc"]
	if !ok || len(novnc) != 2 || len(novnc[1]) != 8 || len(rows["cdp"]) != 2 {
		t.Fatalf("stdout:\n%s", r.Stdout)
	}
	password := novnc[1]
	if strings.Contains(r.Stderr, password) {
		t.Errorf("the password is on stderr: %s", r.Stderr)
	}
	if status, page := loopbackGet(t, novnc[0]); status != 200 || !strings.Contains(page, "noVNC") {
		t.Errorf("noVNC from the host: %d %.200s", status, page)
	}
	onlyLoopback(t, c.Eng, name, "9222/tcp", "6080/tcp")
	info, err := c.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range info.Config.Labels {
		if strings.Contains(v, password) {
			t.Errorf("label %s carries the password", k)
		}
	}
	if !info.HostConfig.ReadonlyRootfs || !slices.Equal(info.HostConfig.CapDrop, []string{"ALL"}) || string(info.HostConfig.NetworkMode) != sandbox.NetworkName(name) {
		t.Errorf("hardening: read-only %v, capDrop %v, network %s", info.HostConfig.ReadonlyRootfs, info.HostConfig.CapDrop, info.HostConfig.NetworkMode)
	}
}

func TestCLICommonGoRun(t *testing.T) {
	// A developer (uid 1000, like the images' user) runs sbx on a checkout of their own; sbx
	// never runs as root implicitly, so a root-owned project would not be writable inside.
	c := newCLIAs(t, 1000)
	c.Write(".sbx.yaml", "profile: common\nworkspace: rw\n")
	c.Trust()
	c.Write("go.mod", "module example.com/hello\n\ngo 1.19\n")
	c.Write("main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from go\") }\n")
	r := c.Run("exec", "--", "bash", "-c", "set -o pipefail; pwd && go run . | tee ran.txt")
	if r.Code != 0 || r.Stdout != "/workspace\nhello from go\n" {
		t.Fatalf("go run: exit %d\nstdout %q\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(c.Project, "ran.txt")); err != nil || string(data) != "hello from go\n" {
		t.Errorf("the sandbox's write to /workspace: %q %v", data, err)
	}
}

// retagEngine is the real engine with one image tag swapped for another in every call that
// names an image. It embeds the engine on purpose: calls that name no image go through.
type retagEngine struct {
	engine.Engine
	t        *testing.T
	from, to string
}

func (e *retagEngine) swap(ref string) string {
	if ref == e.from {
		return e.to
	}
	return ref
}

func (e *retagEngine) ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error) {
	return e.Engine.ImageInspect(ctx, e.swap(ref), opts...)
}

func (e *retagEngine) ImageList(context.Context, image.ListOptions) ([]image.Summary, error) {
	e.t.Error("ImageList is not swapped")
	return nil, io.ErrUnexpectedEOF
}

func (e *retagEngine) ImageRemove(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	if ref == e.from {
		e.t.Errorf("removing %s", ref)
		return nil, io.ErrUnexpectedEOF
	}
	return e.Engine.ImageRemove(ctx, ref, opts)
}

// ImageBuild builds under the swapped tag, offline: the layers are in the build cache, and
// a cache miss must fail rather than reach a package mirror.
func (e *retagEngine) ImageBuild(ctx context.Context, body io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	tags := make([]string, len(opts.Tags))
	for i, tag := range opts.Tags {
		tags[i] = e.swap(tag)
	}
	opts.Tags, opts.NetworkMode = tags, "none"
	return e.Engine.ImageBuild(ctx, body, opts)
}

func (e *retagEngine) ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, nw *network.NetworkingConfig, p *ocispec.Platform, name string) (container.CreateResponse, error) {
	c := *cfg
	c.Image = e.swap(c.Image)
	return e.Engine.ContainerCreate(ctx, &c, host, nw, p, name)
}

// TestExecRebuildsMissingSandboxImage deletes the sandbox image and runs "sbx exec -- true",
// which must rebuild it with progress on stderr and then succeed.
//
// Other tests (and other people's runs on a shared engine) use sbx-sandbox:bookworm-slim
// at the same time, so the real tag is never removed: the engine is wrapped so that every
// call naming that tag names a test-only tag instead, which does not exist. Everything else
// is sbx's own path, in process: the root command, exec, the manager noticing the missing
// bundled image, the embedded build context, the engine's build with sbx's progress on
// stderr, then the sandbox and the exec. The build runs from the layers the real image left
// in the build cache, offline.
func TestExecRebuildsMissingSandboxImage(t *testing.T) {
	c := newCLI(t)
	ctx := context.Background()
	st, err := (&imagebuild.Images{Engine: c.Eng}).Status(ctx, images.ProfileSandbox)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != imagebuild.ImagePresent {
		t.Skipf("%s is %s; its build cache is what makes this test an offline rebuild (run sbx image build sandbox)", st.Tag, st.State)
	}
	testTag := "sbx-sandbox-" + cliRun + ":bookworm-slim"
	if _, err := c.Eng.ImageInspect(ctx, testTag); err == nil {
		t.Fatalf("%s exists before the test", testTag)
	}
	name := cliRun + "-rebuild"
	t.Cleanup(func() {
		// The sandbox goes first, so nothing uses the test image when its tag goes.
		if err := c.Eng.ContainerRemove(ctx, sandbox.ContainerName(name), container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
		if _, err := c.Eng.ImageRemove(ctx, testTag, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: removing %s: %v", testTag, err)
		}
	})

	ios, _, stdout, stderr := iostreams.Test()
	env := map[string]string{"HOME": c.Home, "XDG_CONFIG_HOME": filepath.Join(c.Home, ".config"),
		"XDG_STATE_HOME": filepath.Join(c.Home, ".state"), cmdutil.TestLabelEnv: cliRun}
	eng := &retagEngine{Engine: c.Eng, t: t, from: images.SandboxTag, to: testTag}
	f := cmdutil.TestFactory(ios, env, c.Home, c.Project, time.Now(), eng)
	root := NewCmdRoot(f)
	root.SetArgs([]string{"--project", c.Project, "exec", "-n", name, "--", "true"})
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	code := report(stderr, root.ExecuteContext(runCtx))
	t.Logf("stderr:\n%s", stderr)
	if code != 0 || stdout.Len() != 0 {
		t.Fatalf("sbx exec -- true: exit %d, stdout %q", code, stdout)
	}
	for _, want := range []string{
		"image " + images.SandboxTag + " is missing; building it",
		"building " + images.SandboxTag + " (profile sandbox)",
		"[1/",
		"built " + images.SandboxTag + " (",
		`created sandbox "` + name + `"`,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	built, err := c.Eng.ImageInspect(ctx, testTag)
	if err != nil {
		t.Fatalf("the rebuilt image: %v", err)
	}
	if built.Config.Labels[imagebuild.LabelDockerfileHash] != st.DockerfileHash {
		t.Errorf("rebuilt image labels %v", built.Config.Labels)
	}
	if now, err := c.Eng.ImageInspect(ctx, images.SandboxTag); err != nil || now.ID != st.ID {
		t.Errorf("the shared %s changed: %v", images.SandboxTag, err)
	}
	info, err := c.Eng.ContainerInspect(ctx, sandbox.ContainerName(name))
	if err != nil || info.Config.Labels[enginetest.TestLabel] != cliRun {
		t.Errorf("sandbox not labelled for the sweep: %v", err)
	}
}

// Under gVisor the browser works as in a container, only slower: Chromium starts in gVisor's
// kernel, its DevTools endpoint answers on the host's loopback, a page it is asked to open
// renders (its title comes back), and commands reach the sandbox through the agent.
func TestCLIBrowserHeadlessGVisor(t *testing.T) {
	c := newCLI(t)
	currentBrowserImage(t, c.Eng)
	c.Write(".sbx.yaml", allowBrowser+"isolation: gvisor\n")
	c.Trust()
	name := cliRun + "-chromegv"
	res, cdp := startHeadless(t, c, name)
	info, err := c.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil || info.HostConfig.Runtime != config.GVisorRuntime {
		t.Fatalf("runtime: %v", err)
	}
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", "echo $PPID; uname -r"); r.Code != 0 || strings.HasPrefix(r.Stdout, "0\n") || strings.Contains(r.Stdout, hostRelease(t)) {
		t.Errorf("exec in the browser sandbox, want it through the agent (a parent pid) in gVisor's kernel: %s", r)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPut, cdpBase(res, cdp)+"/json/new?data:text/html,<title>from-gvisor</title>", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("opening a page: %v", err)
	}
	resp.Body.Close()
	// The deadline only fails a page that never renders: under ptrace it took 7 s here.
	var body string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var status int
		if status, body = loopbackGet(t, cdpBase(res, cdp)+"/json/list"); status != 200 {
			continue
		}
		var pages []struct {
			Title string `json:"title"`
		}
		if err := json.Unmarshal([]byte(body), &pages); err != nil {
			t.Fatalf("/json/list: %v: %s", err, body)
		}
		for _, p := range pages {
			if p.Title == "from-gvisor" {
				return
			}
		}
	}
	t.Errorf("the page never rendered its title: %s", body)
}
