package browser_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/browser"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
)

// browserEngine fakes an engine on which a browser sandbox starts: the published DevTools
// port is a local test server's, so the wait really goes over loopback HTTP.
type browserEngine struct {
	fake      *enginetest.FakeEngine
	created   *container.Config
	host      *container.HostConfig
	removed   []string
	state     container.State
	bindings  nat.PortMap
	logs      string
	inspectBy []string
	network   string
	// networkLabels are those the sandbox's network was created with.
	networkLabels map[string]string
}

var errNotFound = cerrdefs.ErrNotFound.WithMessage("No such container")

func newBrowserEngine(t *testing.T, cdpPort string) *browserEngine {
	e := &browserEngine{state: container.State{Status: "running", Running: true}}
	e.bindings = nat.PortMap{
		browser.CDPPort:   {{HostIP: "127.0.0.1", HostPort: cdpPort}},
		browser.NoVNCPort: {{HostIP: "127.0.0.1", HostPort: "49999"}},
	}
	e.fake = &enginetest.FakeEngine{
		T: t,
		ImageInspectFn: func(context.Context, string) (image.InspectResponse, error) {
			return image.InspectResponse{ID: "sha256:img"}, nil
		},
		NetworkCreateFn: func(_ context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error) {
			e.network, e.networkLabels = name, opts.Labels
			return network.CreateResponse{ID: "n1"}, nil
		},
		NetworkInspectFn: func(_ context.Context, name string, _ network.InspectOptions) (network.Inspect, error) {
			if name != e.network {
				return network.Inspect{}, errNotFound
			}
			return network.Inspect{ID: "n1", Name: name, Labels: e.networkLabels}, nil
		},
		NetworkRemoveFn: func(_ context.Context, id string) error {
			e.removed = append(e.removed, "network "+id)
			return nil
		},
		ContainerCreateFn: func(_ context.Context, cfg *container.Config, host *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
			e.created, e.host = cfg, host
			return container.CreateResponse{ID: "c1"}, nil
		},
		ContainerStartFn: func(context.Context, string, container.StartOptions) error { return nil },
		ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) {
			e.inspectBy = append(e.inspectBy, id)
			if id != "c1" || e.created == nil {
				return container.InspectResponse{}, errNotFound
			}
			ports := nat.PortMap{}
			for p, b := range e.bindings {
				if _, ok := e.host.PortBindings[p]; ok {
					ports[p] = b
				}
			}
			st := e.state
			return container.InspectResponse{
				ContainerJSONBase: &container.ContainerJSONBase{ID: "c1", State: &st},
				Config:            e.created,
				NetworkSettings:   enginetest.NetworkSettings(ports),
			}, nil
		},
		ContainerLogsFn: func(_ context.Context, id string, o container.LogsOptions) (io.ReadCloser, error) {
			if o.Tail != "20" || !o.ShowStderr || !o.ShowStdout {
				t.Errorf("logs options %+v", o)
			}
			var buf bytes.Buffer
			_, _ = stdcopy.NewStdWriter(&buf, stdcopy.Stderr).Write([]byte(e.logs))
			return io.NopCloser(&buf), nil
		},
		ContainerRemoveFn: func(_ context.Context, id string, o container.RemoveOptions) error {
			if !o.Force {
				t.Errorf("remove %s without force", id)
			}
			e.removed = append(e.removed, id)
			return nil
		},
	}
	return e
}

// devtools serves /json/version as the relay in front of Chromium does, behind the token
// the sandbox was created with, naming another host than the one it was asked on.
func devtools(t *testing.T, e **browserEngine, status int) (port string) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := createdEnv(*e, browser.TokenEnv)
		if token == "" || r.URL.Path != "/"+token+"/json/version" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"Browser": "HeadlessChrome/120.0.6099.224", "webSocketDebuggerUrl": "ws://localhost:9222/`+token+`/devtools/browser/0f1e"}`)
	}))
	t.Cleanup(srv.Close)
	_, port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

// createdEnv is variable name of the container e created, "" before.
func createdEnv(e *browserEngine, name string) string {
	if e == nil || e.created == nil {
		return ""
	}
	for _, kv := range e.created.Env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// startable is a browser engine whose DevTools endpoint answers with status.
func startable(t *testing.T, status int) *browserEngine {
	var e *browserEngine
	e = newBrowserEngine(t, devtools(t, &e, status))
	return e
}

// browserManager is a manager on fake with sbx's binary, which browser sandboxes mount for
// their relay.
func browserManager(t *testing.T, fake *enginetest.FakeEngine) *sandbox.Manager {
	fake.T = t
	fake.Docker()
	return &sandbox.Manager{Engine: fake, State: &sandbox.StateStore{Dir: t.TempDir(), Now: time.Now}, Now: time.Now,
		AgentBinary: sandboxtest.StaticBinary(t)}
}

func browserInput(headless bool) sandbox.SpecInput {
	cfg := config.Defaults()
	in := sandbox.SpecInput{Name: "app-123456-browser", ProjectRoot: "/src/app", Config: cfg}
	in.Config.Image = images.BrowserTag
	in.Config.Profile = images.ProfileBrowser
	in.Config.Network = "bridge"
	if headless {
		in.Config.Env = map[string]string{"LANG": "C.UTF-8", browser.HeadlessEnv: "1"}
	}
	return in
}

func TestStartDesktop(t *testing.T) {
	e := startable(t, http.StatusOK)
	m := browserManager(t, e.fake)
	// 255 is skipped (it would bias the alphabet), then a, b, ... map to a, b, ...; the
	// token's 24 bytes follow.
	rnd := bytes.NewReader(append([]byte{255, 0, 1, 2, 3, 26, 27, 52, 61}, bytes.Repeat([]byte{0xab}, 24)...))
	b, err := browser.Start(context.Background(), m, browserInput(false), browser.Options{Rand: rnd})
	if err != nil {
		t.Fatal(err)
	}
	token := strings.Repeat("ab", 24)
	if b.Password != "abcdAB09" || b.Token != token {
		t.Errorf("password %q, token %q", b.Password, b.Token)
	}
	port := b.HostPorts[string(browser.CDPPort)]
	if want := "ws://127.0.0.1:" + port + "/" + token + "/devtools/browser/0f1e"; b.CDP != want {
		t.Errorf("cdp %q, want %q", b.CDP, want)
	}
	if b.NoVNC != "http://127.0.0.1:49999/"+token+"/vnc.html?path="+token+"/websockify" || b.Headless || b.Version != "HeadlessChrome/120.0.6099.224" {
		t.Errorf("%+v", b)
	}
	for _, kv := range []string{"SBX_VNC_PASSWORD=abcdAB09", "SBX_BROWSER_TOKEN=" + token, "SBX_BROWSER_RELAY=" + browser.RelayPath} {
		if !slices.Contains(e.created.Env, kv) {
			t.Errorf("env %v lacks %s", e.created.Env, kv)
		}
	}
	relay := 0
	for _, mt := range e.host.Mounts {
		if mt.Target == browser.RelayPath {
			relay++
			if mt.Source != m.AgentBinary || !mt.ReadOnly {
				t.Errorf("the relay's binary is mounted as %+v", mt)
			}
		}
	}
	if relay != 1 {
		t.Errorf("%d mounts of the relay's binary in %+v", relay, e.host.Mounts)
	}
	for k, v := range e.created.Labels {
		if strings.Contains(v, "abcdAB09") || strings.Contains(v, token) {
			t.Errorf("label %s carries the password or the token", k)
		}
	}
	for _, p := range []nat.Port{browser.CDPPort, browser.NoVNCPort} {
		if bs := e.host.PortBindings[p]; len(bs) != 1 || bs[0].HostIP != "127.0.0.1" || bs[0].HostPort != "" {
			t.Errorf("%s bound as %v", p, bs)
		}
	}
	if !e.host.ReadonlyRootfs || !slices.Equal(e.host.CapDrop, []string{"ALL"}) || string(e.host.NetworkMode) != e.network || e.network != sandbox.NetworkName("app-123456-browser") {
		t.Errorf("hardening lost: %+v", e.host)
	}
	if len(e.removed) != 0 {
		t.Errorf("removed %v", e.removed)
	}
}

func TestStartHeadless(t *testing.T) {
	e := startable(t, http.StatusOK)
	m := browserManager(t, e.fake)
	b, err := browser.Start(context.Background(), m, browserInput(true), browser.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Headless || b.NoVNC != "" || b.Password != "" || len(b.HostPorts) != 1 || len(b.Token) != 48 || !strings.Contains(b.CDP, "/"+b.Token+"/devtools/") {
		t.Errorf("%+v", b)
	}
	if _, ok := e.host.PortBindings[browser.NoVNCPort]; ok {
		t.Error("noVNC published in headless mode")
	}
	for _, kv := range e.created.Env {
		if strings.HasPrefix(kv, "SBX_VNC_PASSWORD=") {
			t.Errorf("headless browser got %s", kv)
		}
	}
}

func TestStartFailures(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(e *browserEngine)
		status  int
		wantErr string
	}{
		{name: "never answers", status: http.StatusServiceUnavailable, wantErr: "did not answer within 2s (last try: /json/version answered 503"},
		{name: "exits", status: http.StatusOK, setup: func(e *browserEngine) {
			e.state = container.State{Status: "exited", ExitCode: 64}
		}, wantErr: "stopped (exited, exit status 64)"},
		{name: "bound beyond loopback", status: http.StatusOK, setup: func(e *browserEngine) {
			e.bindings[browser.CDPPort] = append(e.bindings[browser.CDPPort], nat.PortBinding{HostIP: "0.0.0.0", HostPort: "40000"})
		}, wantErr: `published on "0.0.0.0"`},
		// The error is shown: it names no URL, which would carry the token.
		{name: "refuses connections", status: http.StatusOK, setup: func(e *browserEngine) {
			e.bindings[browser.CDPPort] = []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: closedPort(t)}}
		}, wantErr: "(last try: /json/version: dial tcp 127.0.0.1:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startable(t, tt.status)
			e.logs = "sbx-browser: error: SBX_VNC_PASSWORD is empty\n"
			if tt.setup != nil {
				tt.setup(e)
			}
			start := time.Now()
			_, err := browser.Start(context.Background(), browserManager(t, e.fake), browserInput(true), browser.Options{Timeout: 2 * time.Second})
			var se *browser.StartError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want a BrowserStartError with %q", err, tt.wantErr)
			}
			if token := createdEnv(e, browser.TokenEnv); token == "" || strings.Contains(err.Error(), token) {
				t.Errorf("token %q, err %v", token, err)
			}
			if errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(se.Summary(), "  sbx-browser: error: SBX_VNC_PASSWORD is empty\n") {
				t.Errorf("exit %d, summary %q", errs.ExitCode(err), se.Summary())
			}
			if !slices.Equal(e.removed, []string{"c1", "network n1"}) {
				t.Errorf("removed %v, want the failed sandbox and its network", e.removed)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("took %s", time.Since(start))
			}
		})
	}
}

func TestStartRefusals(t *testing.T) {
	t.Run("existing sandbox", func(t *testing.T) {
		e := newBrowserEngine(t, "1")
		in := browserInput(true)
		spec, err := sandbox.BuildSpec(in)
		if err != nil {
			t.Fatal(err)
		}
		e.fake.ContainerInspectFn = func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "c1", State: &container.State{Status: "running"}}, Config: spec.Container}, nil
		}
		_, err = browser.Start(context.Background(), browserManager(t, e.fake), in, browser.Options{})
		var ee *browser.ExistsError
		if !errors.As(err, &ee) || !strings.Contains(errs.Hint(err), "sbx rm -f app-123456-browser") || e.created != nil {
			t.Errorf("err = %v (hint %q); created %v", err, errs.Hint(err), e.created != nil)
		}
	})
	for _, n := range []string{"none", "host", "container:web"} {
		t.Run("network "+n, func(t *testing.T) {
			in := browserInput(true)
			in.Config.Network = n
			// No call is stubbed: the refusal comes before the engine is asked anything.
			_, err := browser.Start(context.Background(), browserManager(t, &enginetest.FakeEngine{}), in, browser.Options{})
			if err == nil || !strings.Contains(err.Error(), "cannot publish ports") || !strings.Contains(errs.Hint(err), "network: bridge") {
				t.Errorf("err = %v, hint %q", err, errs.Hint(err))
			}
		})
	}
	// The relay is sbx's binary: without one the sandbox could mount, nothing would guard
	// the ports, so the engine is asked nothing.
	t.Run("remote engine", func(t *testing.T) {
		m := browserManager(t, &enginetest.FakeEngine{})
		m.Carry = true
		if _, err := browser.Start(context.Background(), m, browserInput(true), browser.Options{}); err == nil || !strings.Contains(err.Error(), "cannot mount sbx's binary") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("no binary", func(t *testing.T) {
		m := browserManager(t, &enginetest.FakeEngine{})
		m.AgentBinary = ""
		if _, err := browser.Start(context.Background(), m, browserInput(true), browser.Options{}); err == nil || !strings.Contains(err.Error(), "sbx does not know where its binary is") {
			t.Errorf("err = %v", err)
		}
	})
}

// closedPort is a port on loopback nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

func TestHeadless(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "true": true, "yes": true, "": false, "0": false, "no": false} {
		if got := browser.Headless(map[string]string{browser.HeadlessEnv: v}); got != want {
			t.Errorf("%q: %v", v, got)
		}
	}
}
