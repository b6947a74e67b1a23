package cmd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/internal/clitest"
)

// forwarder is a running "sbx port-forward": its stdout to read the mappings from (the few
// lines it writes fit in the pipe, so nothing else needs to read it), and its stderr line by
// line.
type forwarder struct {
	t      *testing.T
	stdout *bufio.Reader
	lines  chan string
	done   chan clitest.Result
	cmd    interface{ Signal(os.Signal) error }
	stderr strings.Builder
	mu     sync.Mutex
}

func (c *cli) portForward(args ...string) *forwarder {
	t := c.T
	t.Helper()
	cmd := c.Cmd(append([]string{"port-forward"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &forwarder{t: t, stdout: bufio.NewReader(out), lines: make(chan string, 1000), done: make(chan clitest.Result, 1), cmd: cmd.Process}
	// A bound only for a forward that never ends: the test ends it.
	kill := time.AfterFunc(5*time.Minute, func() { _ = cmd.Process.Kill() })
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			f.mu.Lock()
			f.stderr.WriteString(sc.Text() + "\n")
			f.mu.Unlock()
			select {
			case f.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	go func() {
		<-scanned
		err := cmd.Wait()
		kill.Stop()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.done <- clitest.Result{Code: cmd.ProcessState.ExitCode(), Stderr: f.stderr.String() + fmt.Sprint(err)}
	}()
	return f
}

// waitLine waits for a line of stderr holding want.
func (f *forwarder) waitLine(want string) {
	f.t.Helper()
	for {
		select {
		case l := <-f.lines:
			if strings.Contains(l, want) {
				return
			}
		case r := <-f.done:
			f.t.Fatalf("sbx port-forward ended before saying %q: %s", want, r)
		}
	}
}

// hostAddress is this machine's address that is not loopback, as bench/egress.go finds it.
func hostAddress(t *testing.T) string {
	t.Helper()
	probe, err := net.Dial("udp", "192.0.2.1:9")
	if err != nil {
		t.Fatalf("finding this machine's address: %v", err)
	}
	defer probe.Close()
	ip := probe.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() {
		t.Fatalf("this machine's address %s is loopback", ip)
	}
	return ip.String()
}

func get(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(body), err
}

// TestCLIPortForward: a server in a sandbox with no network, started with exec -d
// --wait-port, reached through sbx port-forward on 127.0.0.1 only; 100 requests at once; a
// second forward of the same local port fails; a connection that finds nothing inside is
// reported and the forward serves on; SIGINT closes the listener.
func TestCLIPortForward(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-pf"
	if r := c.Run("create", "-n", name, "--network", "none"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", "echo hello > /tmp/hello.txt"); r.Code != 0 {
		t.Fatalf("exec: %s", r)
	}
	// Inside: loopback and nothing else, so the forward cannot go through any network.
	if r := c.Run("exec", "-n", name, "--", "python3", "-c", "import socket; print(sorted(n for _, n in socket.if_nameindex()))"); r.Stdout != "['lo']\n" {
		t.Fatalf("the sandbox has interfaces besides lo: %s", r)
	}
	server := func(port string, cmd ...string) {
		t.Helper()
		r := c.Run(append([]string{"exec", "-n", name, "-d", "--wait-port", port, "--wait-timeout", "60s", "--"}, cmd...)...)
		if r.Code != 0 || !strings.Contains(r.Stderr, "waiting for port "+port) {
			t.Fatalf("exec -d --wait-port %s: %s", port, r)
		}
	}
	// http.server's own server, with a listen backlog of 128: python3 -m http.server listens
	// with 5, and 100 connections at once overflow it and hang for a minute, with or without
	// sbx (a Go client straight to it on this machine loses a third of them).
	server("8000", "python3", "-c", `import functools, http.server as s
s.ThreadingHTTPServer.request_queue_size = 128
s.ThreadingHTTPServer(("127.0.0.1", 8000), functools.partial(s.SimpleHTTPRequestHandler, directory="/tmp")).serve_forever()`)

	f := c.portForward("-n", name, "0:8000", "0:8001")
	var urls []string
	for range 2 {
		line, err := f.stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the URLs: %v (stderr %s)", err, f.stderr.String())
		}
		urls = append(urls, strings.TrimSpace(line))
	}
	for _, u := range urls {
		if !strings.HasPrefix(u, "http://127.0.0.1:") {
			t.Fatalf("URLs %q, want http://127.0.0.1:PORT", urls)
		}
	}
	port := strings.TrimPrefix(urls[0], "http://127.0.0.1:")

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 60 * time.Second}
	var wg sync.WaitGroup
	failed := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if body, err := get(client, urls[0]+"/hello.txt"); err != nil || body != "hello\n" {
				failed <- fmt.Errorf("got %q, %v", body, err)
			}
		}()
	}
	wg.Wait()
	close(failed)
	n := 0
	for err := range failed {
		n++
		t.Error(err)
	}
	t.Logf("100 concurrent requests: %d failed", n)

	// Not on this machine's other addresses.
	if conn, err := net.Dial("tcp", net.JoinHostPort(hostAddress(t), port)); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("the forward's port on this machine's address: %v, want connection refused", err)
	}

	// A second sbx on the same local port fails and says why.
	if r := c.Run("port-forward", "-n", name, port+":8000"); r.Code != 1 || !strings.Contains(r.Stderr, "error: cannot listen on 127.0.0.1:"+port+": the port is in use") ||
		!strings.Contains(r.Stderr, "hint: another process") {
		t.Errorf("a second forward of port %s: %s", port, r)
	}

	// Nothing listens on 8001 inside: reported, and the forward serves on once something does.
	if _, err := get(client, urls[1]+"/hello.txt"); err == nil {
		t.Error("a request to a port nothing listens on inside succeeded")
	}
	f.waitLine("nothing listens on port 8001 inside the sandbox")
	server("8001", "python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", "/tmp", "8001")
	if body, err := get(client, urls[1]+"/hello.txt"); err != nil || body != "hello\n" {
		t.Errorf("after the server on 8001 started: %q, %v", body, err)
	}
	if body, err := get(client, urls[0]+"/hello.txt"); err != nil || body != "hello\n" {
		t.Errorf("8000 after the refusal: %q, %v", body, err)
	}

	// SIGINT ends it: exit 0, and the listener is closed.
	if err := f.cmd.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if r := <-f.done; r.Code != 0 {
		t.Errorf("after SIGINT: %s", r)
	}
	for _, u := range urls {
		if conn, err := net.Dial("tcp", strings.TrimPrefix(u, "http://")); !errors.Is(err, syscall.ECONNREFUSED) {
			if conn != nil {
				conn.Close()
			}
			t.Errorf("%s after sbx ended: %v, want connection refused", u, err)
		}
	}

	// --json, --wait-http; SIGTERM ends it too.
	g := c.portForward("-n", name, "--json", "--wait=30s", "--wait-http", "/hello.txt", "0:8000")
	var out struct {
		Sandbox  string `json:"sandbox"`
		Forwards []struct {
			Address    string `json:"address"`
			LocalPort  int    `json:"localPort"`
			RemotePort int    `json:"remotePort"`
			URL        string `json:"url"`
		} `json:"forwards"`
	}
	if err := json.NewDecoder(g.stdout).Decode(&out); err != nil {
		t.Fatalf("--json: %v (stderr %s)", err, g.stderr.String())
	}
	if fw := out.Forwards; out.Sandbox != name || len(fw) != 1 || fw[0].Address != "127.0.0.1" || fw[0].RemotePort != 8000 ||
		fw[0].URL != "http://127.0.0.1:"+strconv.Itoa(fw[0].LocalPort) {
		t.Errorf("--json: %+v", out)
	}
	if body, err := get(client, out.Forwards[0].URL+"/hello.txt"); err != nil || body != "hello\n" {
		t.Errorf("through the --json forward: %q, %v", body, err)
	}
	if err := g.cmd.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := <-g.done; r.Code != 0 {
		t.Errorf("after SIGTERM: %s", r)
	}

	// The MCP tool, once the ports tool is allowed: a forward for the server's lifetime.
	allow := filepath.Join(t.TempDir(), "allow-ports.yaml")
	if err := os.WriteFile(allow, []byte("tools: {allow: [exec, read, write, ports], deny: [browser]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs := c.mcpSession(c.Project, "--config", allow, "-n", name)
	var fwd struct {
		URL        string `json:"url"`
		RemotePort int    `json:"remotePort"`
	}
	if res := mcpCall(t, cs, "forward_port", map[string]any{"port": 8000, "waitSeconds": 30}, &fwd); res.IsError || fwd.RemotePort != 8000 {
		t.Fatalf("forward_port: %+v %+v", res.Content, fwd)
	}
	if body, err := get(client, fwd.URL+"/hello.txt"); err != nil || body != "hello\n" {
		t.Errorf("through forward_port's URL %s: %q, %v", fwd.URL, body, err)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("closing the MCP session: %v", err)
	}
	if conn, err := net.Dial("tcp", strings.TrimPrefix(fwd.URL, "http://")); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("forward_port's %s after the server ended: %v, want connection refused", fwd.URL, err)
	}

	// Not ready in time: exit 124 with what it saw.
	if r := c.Run("exec", "-n", name, "-d", "--wait-port", "8002", "--wait-timeout", "1s", "--", "sleep", "30"); r.Code != 124 ||
		!strings.Contains(r.Stderr, "port 8002 in sandbox \""+name+"\" was not ready within 1s: nothing listened on it") {
		t.Errorf("--wait-port on a port nothing listens on: %s", r)
	}
	// The server answers 404 in milliseconds; the wait is long so that tries finish before
	// it ends even on a loaded machine, and what the last finished one saw is reported.
	if r := c.Run("port-forward", "-n", name, "--wait=5s", "--wait-http", "/nope", "0:8000"); r.Code != 124 ||
		!strings.Contains(r.Stderr, "GET /nope answered 404") {
		t.Errorf("--wait-http on a path that is not there: %s", r)
	}
}
