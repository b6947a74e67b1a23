package cmd

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/browser"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// A browser sandbox's DevTools and noVNC ports answer only a client that carries the
// sandbox's token: any other user of this host reaches 127.0.0.1 and the sandbox's bridge
// address, and must get nothing but a refusal there.

func TestCLIBrowserTokenRoot(t *testing.T) {
	testBrowserToken(t, newCLI(t), cliRun+"-tok")
}

func TestCLIBrowserTokenNonRoot(t *testing.T) {
	testBrowserToken(t, newCLIAs(t, nonRootUID), cliRun+"-tokuser")
}

func testBrowserToken(t *testing.T, c *cli, name string) {
	currentBrowserImage(t, c.Eng)
	c.Write(".sbx.yaml", allowBrowser)
	c.Trust()
	r := c.Run("browser", "-n", name, "--json")
	if r.Code != 0 {
		t.Fatalf("sbx browser: %s", r)
	}
	t.Cleanup(func() { c.Run("rm", "-f", name) })
	var res browser.Result
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || res.Endpoints.NoVNC == nil {
		t.Fatalf("%v: %s", err, r.Stdout)
	}
	cdp, err := url.Parse(res.Endpoints.CDP.URL)
	if err != nil {
		t.Fatal(err)
	}
	novnc, err := url.Parse(res.Endpoints.NoVNC.URL)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	bridge := info.NetworkSettings.Networks[sandbox.NetworkName(name)].IPAddress

	// Without the token: the published ports and the bridge address refuse, and a
	// WebSocket upgrade to the browser's own debugger path gets no further.
	for _, u := range []string{
		"http://" + cdp.Host + "/json/version",
		"http://" + cdp.Host + "/json/list",
		"http://" + cdp.Host + "/wrong-token/json/version",
		"http://" + net.JoinHostPort(bridge, "9222") + "/json/version",
		"http://" + novnc.Host + "/vnc.html",
		"http://" + novnc.Host + "/",
		"http://" + net.JoinHostPort(bridge, "6080") + "/vnc.html",
	} {
		if status, body := plainGet(t, u, ""); status != http.StatusUnauthorized || strings.Contains(body, "Browser") || strings.Contains(body, "noVNC") {
			t.Errorf("GET %s without the token: %d %.200s", u, status, body)
		}
	}
	browserPath := "/devtools/browser/"
	if i := strings.Index(cdp.Path, browserPath); i >= 0 {
		browserPath = cdp.Path[i:]
	}
	if resp, _ := wsDial(t, cdp.Host, browserPath); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a WebSocket to %s without the token: %s", browserPath, resp.Status)
	}

	// With it: the printed URLs work, in the path or as a bearer token.
	token := strings.Split(strings.TrimPrefix(cdp.Path, "/"), "/")[0]
	if len(token) < 32 || strings.Contains(r.Stderr, token) {
		t.Fatalf("cdp URL %s carries no token, or stderr has it: %s", cdp, r.Stderr)
	}
	for _, auth := range []string{"", "Bearer " + token} {
		u := "http://" + cdp.Host + "/" + token + "/json/version"
		if auth != "" {
			u = "http://" + cdp.Host + "/json/version"
		}
		status, body := plainGet(t, u, auth)
		var v struct {
			Browser string `json:"Browser"`
			WS      string `json:"webSocketDebuggerUrl"`
		}
		if err := json.Unmarshal([]byte(body), &v); status != 200 || err != nil || !strings.Contains(v.Browser, "Chrome/") || v.WS != res.Endpoints.CDP.URL {
			t.Errorf("GET %s (authorization %t): %d %s, want the printed %s", u, auth != "", status, body, res.Endpoints.CDP.URL)
		}
	}
	if status, page := plainGet(t, res.Endpoints.NoVNC.URL, ""); status != 200 || !strings.Contains(page, "noVNC") {
		t.Errorf("the printed noVNC page: %d %.200s", status, page)
	}
	if q := novnc.Query().Get("path"); q != token+"/websockify" {
		t.Errorf("noVNC page URL %s: its WebSocket path %q, want the token's", novnc, q)
	}

	// The DevTools protocol itself through the printed URL.
	resp, conn := wsDial(t, cdp.Host, cdp.Path)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("a WebSocket to the printed %s: %s", cdp, resp.Status)
	}
	wsWrite(t, conn, `{"id":1,"method":"Browser.getVersion"}`)
	if msg := wsRead(t, conn); !strings.Contains(msg, `"product":"Chrome/`) {
		t.Errorf("Browser.getVersion: %s", msg)
	}
	// And the VNC server behind noVNC's WebSocket, which greets with its protocol version.
	resp, conn = wsDial(t, novnc.Host, "/"+novnc.Query().Get("path"))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("noVNC's WebSocket: %s", resp.Status)
	}
	if msg := wsRead(t, conn); !strings.HasPrefix(msg, "RFB 003.") {
		t.Errorf("the VNC server through noVNC said %q", msg)
	}

	// Neither the token nor the URLs that carry it are in what other commands show.
	for _, args := range [][]string{{"ls", "--json"}, {"explain", "-n", name, "--json"}, {"ps", "-n", name}} {
		if out := c.Run(args...); strings.Contains(out.Stdout+out.Stderr, token) {
			t.Errorf("sbx %s shows the token", strings.Join(args, " "))
		}
	}
	logs, err := c.Eng.ContainerLogs(context.Background(), info.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	if text, _ := io.ReadAll(io.LimitReader(logs, 1<<20)); strings.Contains(string(text), token) {
		t.Error("the container's log carries the token")
	}
	for k, v := range info.Config.Labels {
		if strings.Contains(v, token) {
			t.Errorf("label %s carries the token", k)
		}
	}
}

// plainGet fetches raw without any proxy, with an Authorization header unless auth is "",
// returning status and body.
func plainGet(t *testing.T, raw, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", raw, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

// wsConn is the client end of a WebSocket.
type wsConn struct {
	net.Conn
	r *bufio.Reader
}

// wsDial asks host for a WebSocket on path and returns the answer and, on 101, the
// connection (closed with the test).
func wsDial(t *testing.T, host, path string) (*http.Response, *wsConn) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path, host)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("WebSocket to %s%s: %v", host, path, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
	}
	return resp, &wsConn{Conn: conn, r: r}
}

// wsWrite sends msg as one masked text frame, as a client must.
func wsWrite(t *testing.T, c *wsConn, msg string) {
	t.Helper()
	if len(msg) > 125 {
		t.Fatal("wsWrite sends short frames only")
	}
	mask := [4]byte{1, 2, 3, 4}
	frame := []byte{0x81, 0x80 | byte(len(msg))}
	frame = append(frame, mask[:]...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^mask[i%4])
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
}

// wsRead reads one unmasked frame from the server, of up to 64 KiB.
func wsRead(t *testing.T, c *wsConn) string {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(c.r, ext[:]); err != nil {
			t.Fatal(err)
		}
		n = int(binary.BigEndian.Uint16(ext[:]))
	case 127:
		t.Fatal("a frame over 64 KiB")
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c.r, buf); err != nil {
		t.Fatalf("reading a frame of %d bytes: %v", n, err)
	}
	return string(buf)
}
