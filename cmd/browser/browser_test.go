package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/browser"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

const allowBrowser = "tools: {allow: [exec, read, write, browser], deny: []}\n"

func TestNewCmdBrowserFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdBrowser, []cmdtest.FlagCase[BrowserOptions]{
		{Args: nil, Check: func(o *BrowserOptions) bool { return o.Name == "" && !o.Headless && !o.JSON }},
		{Args: []string{"-n", "web", "--headless", "--json"}, Check: func(o *BrowserOptions) bool { return o.Name == "web" && o.Headless && o.JSON }},
		{Args: []string{"-n", "Bad Name"}, WantErr: "invalid sandbox name"},
		{Args: []string{"extra"}, WantErr: "unknown command"},
	})
}

// env is a project with an optional .sbx.yaml, trusted (the browser tool and its network are
// the user's choice here), and a factory whose engine is fake; a nil fake fails the test
// when dialled.
type env struct{ *cmdtest.Env }

func newEnv(t *testing.T, projectFile string, fake *enginetest.FakeEngine) env {
	t.Helper()
	e := env{cmdtest.NewEnv(t, fake)}
	e.F.Global.ProjectDir = e.Project
	if projectFile != "" {
		e.WriteProject(t, projectFile, true)
	}
	return e
}

func (e env) run(opts BrowserOptions) error {
	opts.IO, opts.Factory = e.IO, e.F
	return browserRun(context.Background(), &opts)
}

func TestBrowserRunDeniedByDefault(t *testing.T) {
	e := newEnv(t, "", nil)
	err := e.run(BrowserOptions{})
	var pe *config.PolicyError
	if !errors.As(err, &pe) || !strings.Contains(errs.Hint(err), `remove "browser" from tools.deny`) {
		t.Fatalf("err = %v, hint %q", err, errs.Hint(err))
	}
	if errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("exit %d", errs.ExitCode(err))
	}
}

func TestBrowserRunNeedsPublishableNetwork(t *testing.T) {
	e := newEnv(t, allowBrowser+"network: none\n", nil)
	err := e.run(BrowserOptions{Headless: true})
	if err == nil || !strings.Contains(err.Error(), "cannot publish ports") || !strings.Contains(errs.Hint(err), "project:"+filepath.Join(e.Project, ".sbx.yaml")) {
		t.Fatalf("err = %v, hint %q", err, errs.Hint(err))
	}
}

// fakeBrowser is an engine on which one browser sandbox starts (or exits, with state), its
// DevTools port served by a local test server.
type fakeBrowser struct {
	*enginetest.FakeEngine
	name    string
	cfg     *container.Config
	host    *container.HostConfig
	state   container.State
	removed bool
	// networkLabels are those the sandbox's network was created with.
	networkLabels map[string]string
}

func newFakeBrowser(t *testing.T) *fakeBrowser {
	fb := &fakeBrowser{state: container.State{Status: "running", Running: true}}
	// As the relay in the sandbox answers: behind the token.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := fb.env(browser.TokenEnv)
		if token == "" || r.URL.Path != "/"+token+"/json/version" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"Browser": "Chrome/120.0.6099.224", "webSocketDebuggerUrl": "ws://`+r.Host+`/`+token+`/devtools/browser/77aa"}`)
	}))
	t.Cleanup(srv.Close)
	_, cdpPort, _ := net.SplitHostPort(srv.Listener.Addr().String())
	fb.FakeEngine = &enginetest.FakeEngine{
		T: t,
		ImageInspectFn: func(_ context.Context, ref string) (image.InspectResponse, error) {
			return image.InspectResponse{ID: "sha256:" + ref}, nil
		},
		NetworkCreateFn: func(_ context.Context, _ string, opts network.CreateOptions) (network.CreateResponse, error) {
			fb.networkLabels = opts.Labels
			return network.CreateResponse{ID: "n1"}, nil
		},
		NetworkInspectFn: func(_ context.Context, name string, _ network.InspectOptions) (network.Inspect, error) {
			return network.Inspect{ID: "n1", Name: name, Labels: fb.networkLabels}, nil
		},
		NetworkRemoveFn: func(context.Context, string) error { return nil },
		ContainerCreateFn: func(_ context.Context, cfg *container.Config, host *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
			fb.name, fb.cfg, fb.host = name, cfg, host
			return container.CreateResponse{ID: "b1"}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { return nil },
		ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) {
			if id != "b1" {
				return container.InspectResponse{}, cerrdefs.ErrNotFound.WithMessage("No such container: " + id)
			}
			ports := nat.PortMap{browser.CDPPort: {{HostIP: "127.0.0.1", HostPort: cdpPort}}}
			if _, ok := fb.host.PortBindings[browser.NoVNCPort]; ok {
				ports[browser.NoVNCPort] = []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: "40080"}}
			}
			st := fb.state
			return container.InspectResponse{
				ContainerJSONBase: &container.ContainerJSONBase{ID: "b1", State: &st},
				Config:            fb.cfg,
				NetworkSettings:   enginetest.NetworkSettings(ports),
			}, nil
		},
		ContainerLogsFn: func(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
			var buf bytes.Buffer
			_, _ = stdcopy.NewStdWriter(&buf, stdcopy.Stderr).Write([]byte("sbx-browser: chromium exited with status 1; stopping the rest\n"))
			return io.NopCloser(&buf), nil
		},
		ContainerRemoveFn: func(context.Context, string, container.RemoveOptions) error { fb.removed = true; return nil },
	}
	fb.FakeEngine.Docker()
	return fb
}

// env is variable name of the created container, "" before it is.
func (fb *fakeBrowser) env(name string) string {
	if fb.cfg == nil {
		return ""
	}
	for _, kv := range fb.cfg.Env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

func TestBrowserRun(t *testing.T) {
	fb := newFakeBrowser(t)
	e := newEnv(t, allowBrowser, fb.FakeEngine)
	if err := e.run(BrowserOptions{}); err != nil {
		t.Fatalf("%v\n%s", err, e.Err)
	}
	def := config.DefaultName(e.Project)
	if fb.name != sandbox.ContainerName(def+"-browser") {
		t.Errorf("container %q, want the project's name with -browser", fb.name)
	}
	if fb.cfg.Image != images.BrowserTag || fb.cfg.Labels[sandbox.LabelProfile] != images.ProfileBrowser || string(fb.host.NetworkMode) != sandbox.NetworkName(def+"-browser") {
		t.Errorf("image %s profile %s network %s", fb.cfg.Image, fb.cfg.Labels[sandbox.LabelProfile], fb.host.NetworkMode)
	}
	var password string
	for _, kv := range fb.cfg.Env {
		if v, ok := strings.CutPrefix(kv, browser.PasswordEnv+"="); ok {
			password = v
		}
	}
	if len(password) != 8 {
		t.Fatalf("password %q in %v", password, fb.cfg.Env)
	}
	token := fb.env(browser.TokenEnv)
	if len(token) != 48 {
		t.Fatalf("token %q in %v", token, fb.cfg.Env)
	}
	lines := strings.Split(strings.TrimSpace(e.Out.String()), "\n")
	want := []string{"ENDPOINT\tURL\tPASSWORD", "cdp\tws://127.0.0.1:", "novnc\thttp://127.0.0.1:40080/" + token + "/vnc.html?path=" + token + "/websockify\t" + password}
	if len(lines) != 3 || lines[0] != want[0] || !strings.HasPrefix(lines[1], want[1]) || !strings.HasSuffix(lines[1], "/"+token+"/devtools/browser/77aa\t-") || lines[2] != want[2] {
		t.Errorf("stdout:\n%s", e.Out)
	}
	if strings.Contains(e.Err.String(), password) || strings.Contains(e.Err.String(), token) || !strings.Contains(e.Err.String(), "sbx rm -f "+def+"-browser") {
		t.Errorf("stderr:\n%s", e.Err)
	}
	for k, v := range fb.cfg.Labels {
		if strings.Contains(v, password) || strings.Contains(v, token) {
			t.Errorf("label %s carries the password or the token", k)
		}
	}
}

func TestBrowserRunHeadlessJSON(t *testing.T) {
	fb := newFakeBrowser(t)
	e := newEnv(t, allowBrowser, fb.FakeEngine)
	if err := e.run(BrowserOptions{Name: "shot", Headless: true, JSON: true}); err != nil {
		t.Fatalf("%v\n%s", err, e.Err)
	}
	var res Result
	if err := json.Unmarshal(e.Out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, e.Out)
	}
	token := fb.env(browser.TokenEnv)
	if res.Name != "shot" || res.Container != "sbx-shot" || res.ID != "b1" || !res.Headless || res.Browser != "Chrome/120.0.6099.224" ||
		res.Token != token || len(token) != 48 || !strings.HasPrefix(res.Endpoints.CDP.URL, "ws://127.0.0.1:") ||
		!strings.Contains(res.Endpoints.CDP.URL, "/"+token+"/devtools/") || res.Endpoints.NoVNC != nil {
		t.Errorf("%+v", res)
	}
	if strings.Contains(e.Out.String(), "password") {
		t.Errorf("headless output has a password field: %s", e.Out)
	}
	if !slices.Contains(fb.cfg.Env, "SBX_BROWSER_HEADLESS=1") || len(fb.host.PortBindings) != 1 {
		t.Errorf("env %v bindings %v", fb.cfg.Env, fb.host.PortBindings)
	}
}

func TestBrowserRunStartFailure(t *testing.T) {
	fb := newFakeBrowser(t)
	fb.state = container.State{Status: "exited", ExitCode: 1}
	e := newEnv(t, allowBrowser, fb.FakeEngine)
	err := e.run(BrowserOptions{Name: "shot", Headless: true})
	if err == nil || !strings.Contains(err.Error(), `browser sandbox "shot" did not start`) || !fb.removed {
		t.Fatalf("err = %v, removed %v", err, fb.removed)
	}
	if !strings.Contains(e.Err.String(), "  sbx-browser: chromium exited with status 1") || e.Out.Len() != 0 {
		t.Errorf("stdout %q stderr %q", e.Out, e.Err)
	}
}

func TestDefaultName(t *testing.T) {
	long := strings.Repeat("a", 56) + "-0a1b2c"
	for in, want := range map[string]string{
		"app-0a1b2c": "app-0a1b2c-browser",
		long:         strings.Repeat("a", 48) + "-0a1b2c-browser",
	} {
		got := DefaultName(in)
		if got != want || len(got) > 63 || config.ValidName(got) != nil {
			t.Errorf("DefaultName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The end of a failed browser's log is what the sandbox printed: shown, it is escaped.
func TestPrintStartFailureEscapesTheLog(t *testing.T) {
	var b bytes.Buffer
	printStartFailure(&b, &browser.StartError{Name: "b", Err: errors.New("no"), Tail: []string{"chromium: ok", "\x1b]0;pwned\x07\x1b[2J\r\u202e"}})
	want := "last 2 lines of the browser sandbox's log:\n  chromium: ok\n  \\u001b]0;pwned\\u0007\\u001b[2J\\u000d\\u202e\n"
	if b.String() != want {
		t.Errorf("got %q\nwant %q", b.String(), want)
	}
}

// The browser's product string comes from Chromium's /json/version, inside the sandbox.
func TestPrintEndpointsEscapesTheVersion(t *testing.T) {
	ios, _, out, errOut := iostreams.Test()
	if err := printEndpoints(ios, Result{Name: "b", Browser: "Chrome/1\x1b]0;pwned\x07", Endpoints: Endpoints{CDP: Endpoint{URL: "ws://127.0.0.1:1/devtools/browser/x"}}}); err != nil {
		t.Fatal(err)
	}
	if s := out.String() + errOut.String(); strings.ContainsAny(s, "\x1b\x07") || !strings.Contains(s, `runs Chrome/1\u001b]0;pwned\u0007;`) {
		t.Errorf("%q", s)
	}
}

func TestNewCmdRelayFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdRelay, []cmdtest.FlagCase[RelayOptions]{
		{Args: []string{"--token-file", "/t", "--cdp", "0.0.0.0:9222=127.0.0.1:9223"}, Check: func(o *RelayOptions) bool {
			return o.TokenFile == "/t" && o.CDP == "0.0.0.0:9222=127.0.0.1:9223" && o.NoVNC == ""
		}},
		{Args: []string{"--cdp", "a=b"}, WantErr: `"token-file" not set`},
		{Args: []string{"--token-file", "/t"}, WantErr: `"cdp" not set`},
	})
}

func TestRelayRunRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, token string
		opts        RelayOptions
		wantErr     string
	}{
		{name: "bad route", token: strings.Repeat("ab", 24), opts: RelayOptions{CDP: "0.0.0.0:9222"}, wantErr: "want LISTEN=BACKEND"},
		{name: "bad token", token: "short\n", opts: RelayOptions{CDP: "127.0.0.1:0=127.0.0.1:1"}, wantErr: "does not hold a token of 48 hex digits"},
		{name: "no file", opts: RelayOptions{CDP: "127.0.0.1:0=127.0.0.1:1"}, wantErr: "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name)
			if c.token != "" {
				if err := os.WriteFile(path, []byte(c.token), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c.opts.TokenFile = path
			if err := relayRun(context.Background(), &c.opts); err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("err = %v, want %q", err, c.wantErr)
			}
		})
	}
	// A token file read is gone, whatever it held.
	if _, err := os.Stat(filepath.Join(dir, "bad token")); !os.IsNotExist(err) {
		t.Errorf("the token file is still there: %v", err)
	}
}
