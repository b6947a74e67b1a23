// Package browser owns "sbx browser" and the MCP browser tool: a sandbox of the browser
// profile whose Chromium (and, unless headless, its screen through noVNC) is published on
// 127.0.0.1 behind sbx's relay (pkg/browserrelay) and a one-off token. Of the lifecycle it
// needs a new sandbox started with a readiness wait (Manager.StartNew), whether this sbx's
// binary can run there, and the engine's view of the published ports.
package browser

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/browserrelay"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Ports and variables of the browser image's entrypoint (images/sbx-browser-entrypoint.sh).
// Both ports are sbx's relay (pkg/browserrelay), which forwards only requests that carry
// the sandbox's token: every user of the host reaches the published ports on 127.0.0.1 and
// the sandbox's address on its bridge.
const (
	CDPPort     = "9222/tcp" // Chromium's DevTools protocol, relayed from its loopback
	NoVNCPort   = "6080/tcp" // noVNC in front of the VNC server, unless headless
	HeadlessEnv = "SBX_BROWSER_HEADLESS"
	PasswordEnv = "SBX_VNC_PASSWORD"
	TokenEnv    = "SBX_BROWSER_TOKEN"
	RelayEnv    = "SBX_BROWSER_RELAY"
	// RelayPath is where a browser sandbox sees sbx's binary, read-only, which runs its relay.
	RelayPath = sandbox.RelayPath
)

// StartTimeout is how long Start waits for Chromium's DevTools endpoint;
// gvisorBrowserStart under gVisor, where Chromium's start under the ptrace platform took 31 s
// and more on a loaded 2-CPU machine (measured: 30 s was too short one start in five).
const (
	StartTimeout = 30 * time.Second
	gvisorStart  = 4 * StartTimeout
)

// vncPasswordLen is what VNC authentication reads of a password: its first 8 characters.
const vncPasswordLen = 8

// Options tune Start.
type Options struct {
	// Timeout bounds the wait for /json/version; 0 means StartTimeout (more under gVisor).
	Timeout time.Duration
	// Rand is the source of the VNC password and the token; nil means crypto/rand.
	Rand io.Reader
}

// Browser is a started browser sandbox and how to reach it from the host.
type Browser struct {
	Sandbox  *sandbox.Sandbox
	Headless bool
	// Version is Chromium's product string from /json/version, e.g. "Chrome/120.0.6099.224".
	Version string
	// CDP is the DevTools WebSocket URL on the published host port, behind the token.
	CDP string
	// NoVNC is the noVNC page on the published host port, behind the token, "" when headless.
	NoVNC string
	// Token is the secret the sandbox's relay asks of every client: the first segment of
	// each URL's path, or "Authorization: Bearer TOKEN". Like Password, it is stored
	// nowhere but in the container's variables, which only whoever controls the engine sees.
	Token string
	// Password is the one-off VNC password, "" when headless. It is stored nowhere else.
	Password string
	// HostPorts maps each published container port ("9222/tcp") to its port on 127.0.0.1.
	HostPorts map[string]string
}

// Headless reports whether env makes the browser image run headless, read as its entrypoint
// reads SBX_BROWSER_HEADLESS.
func Headless(env map[string]string) bool {
	switch env[HeadlessEnv] {
	case "1", "true", "yes":
		return true
	}
	return false
}

// Start creates and starts a new browser sandbox from in (whose config should be the
// browser profile's) and waits until Chromium answers on its published DevTools port. The
// ports are published on 127.0.0.1 only, behind sbx's relay and a new token; unless the
// config makes it headless, a one-off VNC password guards the screen too. Both are passed
// as container variables. A sandbox of that name must not exist: its token could not be
// recovered. When the browser does not come up, the sandbox is removed and a *StartError
// carries the end of its log.
func Start(ctx context.Context, m *sandbox.Manager, in sandbox.SpecInput, opts Options) (*Browser, error) {
	if err := sandbox.CanPublish(in.Config.Network); err != nil {
		return nil, errs.Failure(fmt.Errorf("browser sandbox %q: %w", in.Name, err), "set network: bridge for this sandbox")
	}
	// The relay is this sbx's binary, which the engine mounts from this machine.
	if m.Carry {
		return nil, errs.Failure(fmt.Errorf("browser sandbox %q: the engine is on another machine, so it cannot mount sbx's binary, which guards the browser's ports", in.Name),
			"run sbx browser against an engine on this machine")
	}
	if p := m.AgentBinaryProblem(in.Config.Image); p != "" {
		return nil, errs.Failure(fmt.Errorf("browser sandbox %q: sbx's binary guards the browser's ports, and the sandbox cannot run it: %s", in.Name, p), "")
	}
	switch _, err := m.Inspect(ctx, in.Name); {
	case err == nil:
		return nil, &ExistsError{Name: in.Name}
	case !sandbox.IsNotFound(err):
		return nil, err
	}

	b := &Browser{Headless: Headless(in.Config.Env), HostPorts: map[string]string{}}
	in.Ports = []string{CDPPort}
	in.OneOffEnv = slices.Clone(in.OneOffEnv)
	if !b.Headless {
		pw, err := vncPassword(opts.Rand)
		if err != nil {
			return nil, err
		}
		b.Password = pw
		in.Ports = append(in.Ports, NoVNCPort)
		in.OneOffEnv = append(in.OneOffEnv, PasswordEnv+"="+pw)
	}
	token, err := browserrelay.NewToken(opts.Rand)
	if err != nil {
		return nil, errs.Failure(err, "")
	}
	b.Token = token
	in.RelayBinary = m.AgentBinary
	in.OneOffEnv = append(in.OneOffEnv, TokenEnv+"="+token, RelayEnv+"="+RelayPath)

	timeout := opts.Timeout
	switch {
	case timeout > 0:
	case in.Config.Isolation == config.IsolationGVisor:
		timeout = gvisorStart
	default:
		timeout = StartTimeout
	}
	sb, err := m.StartNew(ctx, in, func(ctx context.Context, sb *sandbox.Sandbox) error {
		hostPorts, version, err := waitForBrowser(ctx, m.Engine, sb, in.Ports, token, timeout)
		if err != nil {
			return err
		}
		b.HostPorts, b.Version = hostPorts, version.Browser
		if b.CDP, err = hostWebSocketURL(version.WebSocketDebuggerURL, hostPorts[CDPPort], token); err != nil {
			return err
		}
		if !b.Headless {
			b.NoVNC = noVNCURL(hostPorts[NoVNCPort], token)
		}
		return nil
	})
	var failed *sandbox.NewStartError
	switch {
	case cerrdefs.IsConflict(err):
		return nil, &ExistsError{Name: in.Name}
	case errors.As(err, &failed):
		return nil, &StartError{Name: failed.Name, Err: failed.Err, Tail: failed.Tail}
	case err != nil:
		return nil, err
	}
	b.Sandbox = sb
	return b, nil
}

// noVNCURL is noVNC's page on host port hostPort behind token; its path parameter tells
// the page to open its WebSocket behind the token too.
func noVNCURL(hostPort, token string) string {
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(sandbox.LoopbackIP, hostPort), Path: "/" + token + "/vnc.html",
		RawQuery: "path=" + token + "/websockify"}
	return u.String()
}

// vncPassword returns a random password of the length VNC reads, from letters and digits
// so it can be typed; 62^8 is about 2^47.
func vncPassword(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	out := make([]byte, 0, vncPasswordLen)
	buf := make([]byte, 1)
	for len(out) < vncPasswordLen {
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", errs.Failure(fmt.Errorf("generating the VNC password: %w", err), "")
		}
		// Bytes past the last whole multiple of the alphabet would favour its first letters.
		if int(buf[0]) < 256-256%len(alphabet) {
			out = append(out, alphabet[int(buf[0])%len(alphabet)])
		}
	}
	return string(out), nil
}

// cdpVersion is the part of Chromium's /json/version that sbx reads.
type cdpVersion struct {
	Browser              string `json:"Browser"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

// browserPoll is the pause between two checks of a starting browser.
const browserPoll = 250 * time.Millisecond

// inspector is the engine's inspect, which tells the published ports and whether the
// container still runs.
type inspector interface {
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// waitForBrowser polls until /json/version answers through the published DevTools port,
// with token. It returns early when the container stops, and refuses any port bound beyond
// loopback.
func waitForBrowser(ctx context.Context, eng inspector, sb *sandbox.Sandbox, ports []string, token string, timeout time.Duration) (map[string]string, cdpVersion, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// No proxy: the request must go to this host's loopback and nowhere else.
	hc := &http.Client{
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		Timeout:       2 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer hc.CloseIdleConnections()
	var last error
	for {
		info, err := eng.ContainerInspect(wctx, sb.ID)
		switch {
		case err != nil && wctx.Err() != nil:
		case err != nil:
			return nil, cdpVersion{}, errs.Engine(fmt.Sprintf("inspecting browser sandbox %q", sb.Name), err)
		case info.State != nil && !info.State.Running && info.State.Status != "created":
			return nil, cdpVersion{}, fmt.Errorf("the container stopped (%s, exit status %d) before Chromium answered", info.State.Status, info.State.ExitCode)
		default:
			hostPorts, err := publishedPorts(info, ports)
			if err != nil {
				return nil, cdpVersion{}, err
			}
			if hostPorts != nil {
				v, err := fetchVersion(wctx, hc, hostPorts[CDPPort], token)
				if err == nil {
					return hostPorts, v, nil
				}
				// A try the deadline cut says less than the one before it.
				if last == nil || wctx.Err() == nil {
					last = err
				}
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, cdpVersion{}, ctx.Err()
			}
			msg := fmt.Sprintf("Chromium's DevTools endpoint did not answer within %s", timeout)
			if last != nil {
				msg += " (last try: " + last.Error() + ")"
			}
			return nil, cdpVersion{}, errors.New(msg)
		case <-time.After(browserPoll):
		}
	}
}

// publishedPorts maps each wanted container port to its host port, or returns nil while the
// engine has not reported them all. A binding on any address but 127.0.0.1 is an error: sbx
// never exposes a sandbox beyond this host.
func publishedPorts(info container.InspectResponse, want []string) (map[string]string, error) {
	if info.NetworkSettings == nil {
		return nil, nil
	}
	out := map[string]string{}
	for port, bindings := range info.NetworkSettings.Ports {
		for _, b := range bindings {
			if b.HostIP != sandbox.LoopbackIP {
				return nil, fmt.Errorf("port %s is published on %q, not only on %s; refusing to use it", port, b.HostIP, sandbox.LoopbackIP)
			}
			if b.HostPort != "" {
				out[string(port)] = b.HostPort
			}
		}
	}
	for _, p := range want {
		if out[p] == "" {
			return nil, nil
		}
	}
	return out, nil
}

// fetchVersion asks Chromium for /json/version through host port hostPort on loopback,
// past the relay with token.
func fetchVersion(ctx context.Context, hc *http.Client, hostPort, token string) (cdpVersion, error) {
	var v cdpVersion
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(sandbox.LoopbackIP, hostPort)+"/"+token+"/json/version", nil)
	if err != nil {
		return v, err
	}
	resp, err := hc.Do(req)
	// Without the URL, which carries the token, so that the error can be shown.
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err
	}
	if err != nil {
		return v, fmt.Errorf("/json/version: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("/json/version answered %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil {
		return v, fmt.Errorf("/json/version: %w", err)
	}
	if v.WebSocketDebuggerURL == "" {
		return v, errors.New("/json/version has no webSocketDebuggerUrl")
	}
	return v, nil
}

// hostWebSocketURL points the debugger URL the relay gave, behind token, at the published
// host port: the relay names the host it was asked on, which the engine's port mapping may
// have changed.
func hostWebSocketURL(raw, hostPort, token string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "ws" || !strings.HasPrefix(u.Path, "/"+token+"/devtools/") {
		return "", fmt.Errorf("unexpected webSocketDebuggerUrl %q from Chromium", raw)
	}
	u.Host = net.JoinHostPort(sandbox.LoopbackIP, hostPort)
	return u.String(), nil
}

// StartError is a browser sandbox that did not come up; it has been removed.
type StartError struct {
	Name string
	Err  error
	Tail []string // the last lines of its log
}

func (e *StartError) Error() string {
	return fmt.Sprintf("browser sandbox %q did not start: %v", e.Name, e.Err)
}
func (e *StartError) Unwrap() error { return e.Err }
func (e *StartError) ExitCode() int { return errs.CodeFailure }
func (e *StartError) Hint() string {
	if len(e.Tail) == 0 {
		return "the sandbox was removed; try again, and run sbx doctor if it keeps failing"
	}
	return "the sandbox was removed; the end of its log above says why"
}

// Summary is the end of the failed browser's log, as printed before the error.
func (e *StartError) Summary() string {
	if len(e.Tail) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "last %d lines of the browser sandbox's log:\n", len(e.Tail))
	for _, l := range e.Tail {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	return b.String()
}

// ExistsError is a browser start refused because the sandbox name is taken.
type ExistsError struct{ Name string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("sandbox %q already exists", e.Name)
}
func (e *ExistsError) ExitCode() int { return errs.CodeFailure }
func (e *ExistsError) Hint() string {
	return fmt.Sprintf("sbx browser starts a new sandbox each time, since its one-off token and password are kept nowhere: remove the old one with \"sbx rm -f %s\", or pick another name with -n", e.Name)
}
