package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// A browser sandbox's DevTools port answers the URL sbx prints, on the host, and nobody on
// the engine's networks: not a plain container on the default bridge, not through that
// bridge's gateway, not another sandbox with network access.
func TestCLIBrowserIsolated(t *testing.T) {
	c := newBrowserCLI(t)
	name := cliRun + "-iso"
	res, cdp := startHeadless(t, c, name)
	if status, body := loopbackGet(t, cdpBase(res, cdp)+"/json/version"); status != 200 || !strings.Contains(body, `"Browser"`) {
		t.Fatalf("the printed URL from the host: %d %s", status, body)
	}
	ctx := context.Background()
	info, err := c.Eng.ContainerInspect(ctx, sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	own, ok := info.NetworkSettings.Networks[sandbox.NetworkName(name)]
	if !ok || len(info.NetworkSettings.Networks) != 1 {
		t.Fatalf("networks %v, want only %s", info.NetworkSettings.Networks, sandbox.NetworkName(name))
	}
	// With the token, so that only the network can keep the probes out.
	ask := func(host, port string) string {
		return fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s && printf "GET /%s/json/version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" >&3 && cat <&3'; echo "exit $?"`, host, port, res.Token)
	}
	// The controls, so that a failure below is the network's doing, not the probe's: the same
	// probe from inside the browser's own network namespace gets CDP, and the host reaches the
	// address the probes aim at.
	if out := probeContainer(t, c, "container:"+info.ID, ask("127.0.0.1", "9222")); !strings.Contains(out, `"Browser"`) {
		t.Fatalf("the probe in the browser's network namespace got no answer: %s", out)
	}
	if body := hostGet(t, net.JoinHostPort(own.IPAddress, "9222"), "/"+res.Token+"/json/version"); !strings.Contains(body, `"Browser"`) {
		t.Fatalf("the host at %s: %s", own.IPAddress, body)
	}
	def := probeContainer(t, c, "bridge", "ip route | awk '/default/ {print $3}'")
	gateway := strings.TrimSpace(strings.Split(def, "\n")[0])
	for what, probe := range map[string]string{
		"the sandbox's address from the default bridge": ask(own.IPAddress, "9222"),
		"the published port through the bridge gateway": ask(gateway, cdp.Port()),
	} {
		if out := probeContainer(t, c, "bridge", probe); strings.Contains(out, "Browser") || strings.Contains(out, "exit 0") {
			t.Errorf("%s answered: %s", what, out)
		}
	}
	other := cliRun + "-iso-peer"
	if r := c.Run("create", "-n", other, "--network", "bridge"); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	py := fmt.Sprintf(`import socket
try:
    s = socket.create_connection(("%s", 9222), timeout=5)
    s.sendall(b"GET /%s/json/version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    print("answered", s.recv(200))
except OSError as e:
    print("no answer:", e)`, own.IPAddress, res.Token)
	if r := c.Run("exec", "-n", other, "--", "python3", "-c", py); r.Code != 0 || !strings.HasPrefix(r.Stdout, "no answer:") {
		t.Errorf("another sandbox with network access reached the browser: %s %s", r.Stdout, r.Stderr)
	}
	for _, n := range []string{name, other} {
		if r := c.Run("rm", "-f", n); r.Code != 0 {
			t.Errorf("rm: %s", r.Stderr)
		}
		if _, err := c.Eng.NetworkInspect(ctx, sandbox.NetworkName(n), network.InspectOptions{}); err == nil {
			t.Errorf("rm left the network %s", sandbox.NetworkName(n))
		}
	}
}

// probeContainer runs script with bash in a plain container of the base image on network and
// returns its output.
func probeContainer(t *testing.T, c *cli, network, script string) string {
	t.Helper()
	ctx := context.Background()
	resp, err := c.Eng.ContainerCreate(ctx, &container.Config{Image: "debian:bookworm-slim", Cmd: []string{"bash", "-c", script},
		Labels: map[string]string{enginetest.TestLabel: cliRun}}, &container.HostConfig{NetworkMode: container.NetworkMode(network)}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Eng.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true}) }()
	if err := c.Eng.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	logs, err := c.Eng.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// hostGet asks addr (a container this test made) for path from the host. Chromium answers
// HTTP/1.1 requests only.
func hostGet(t *testing.T, addr, path string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dialling %s from the host: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(conn, 64<<10))
	return string(body)
}
