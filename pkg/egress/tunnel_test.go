package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A CONNECT tunnel carries TLS end to end to an allowed name.
func TestProxyConnectTLS(t *testing.T) {
	backend := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s %s", r.Host, r.TLS.ServerName)
	}))
	defer backend.Close()
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	px := newProxy(t, File{Allow: []string{fmt.Sprintf("allowed.test:%d", port), "127.0.0.1"}}, nil)
	client := px.client(backend)
	resp, err := client.Get(fmt.Sprintf("https://allowed.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != fmt.Sprintf("tls allowed.test:%d example.com", port) {
		t.Errorf("body %q", body)
	}
	client.CloseIdleConnections() // the tunnel ends, and then it is logged
	px.log.waitLines(t, 1)
	px.close()
	lines := px.log.lines()
	if len(lines) != 1 {
		t.Fatalf("log %q", lines)
	}
	entries, _, _ := ReadLog(strings.NewReader(lines[0]+"\n"), 1)
	e := entries[0]
	if e.Method != "CONNECT" || e.Host != "allowed.test" || e.Port != port || e.Addr != "127.0.0.1" || !e.Allowed ||
		e.Rule != fmt.Sprintf("allowed.test:%d", port) || e.BytesUp < 200 || e.BytesDown < 500 || e.Reason != "" {
		t.Errorf("log %s", lines[0])
	}
}

// A tunnel to an address rule's address, raw bytes both ways, and bytes the client sent
// right behind its CONNECT head.
func TestProxyConnectAddressLiteral(t *testing.T) {
	port := tcpBackend(t, func(c net.Conn) {
		b, _ := io.ReadAll(c) // until the client's half-close
		io.WriteString(c, strings.ToUpper(string(b)))
	})
	px := newProxy(t, File{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}}, nil)
	c, _ := px.dial()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%[1]d\r\n\r\nearly ", port)
	br := bufio.NewReader(c)
	resp, _ := readResponse(t, br, "CONNECT")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	io.WriteString(c, "late")
	c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(br)
	if string(got) != "EARLY LATE" {
		t.Errorf("got %q", got)
	}
	checkLog(t, px, fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"CONNECT","host":"127.0.0.1","port":%d,"addr":"127.0.0.1","allowed":true,"rule":"127.0.0.1:%[1]d","bytesUp":10,"bytesDown":10,"durationMs":0}`, port))
	if q := px.resolver.questions(); len(q) != 0 {
		t.Errorf("an address was resolved: %q", q)
	}
}

// A busy tunnel outlives IdleTimeout while one direction alone carries traffic.
func TestProxyTunnelBusyOneWay(t *testing.T) {
	port := tcpBackend(t, func(c net.Conn) {
		for i := 0; i < 20; i++ { // 20 x 40ms = 4 x IdleTimeout
			if _, err := io.WriteString(c, "tick\n"); err != nil {
				return
			}
			time.Sleep(40 * time.Millisecond)
		}
	})
	px := newProxy(t, File{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}}, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	c, _ := px.dial()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", port)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, _ := io.ReadAll(c)
	if got := strings.Count(string(b), "tick\n"); got != 20 {
		t.Errorf("got %d ticks through a one-way tunnel: %q", got, b)
	}
}

// Close ends open tunnels and returns once they are logged.
func TestProxyCloseEndsTunnels(t *testing.T) {
	ended := make(chan error, 1)
	port := tcpBackend(t, func(c net.Conn) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		ended <- err
	})
	px := newProxy(t, File{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}}, nil)
	c, _ := px.dial()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", port)
	if resp, _ := readResponse(t, bufio.NewReader(c), "CONNECT"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	px.close()
	entries, _, _ := ReadLog(strings.NewReader(strings.Join(px.log.lines(), "\n")+"\n"), 10)
	if len(entries) != 1 || !entries[0].Allowed || !strings.HasPrefix(entries[0].Reason, "tunnel: ") {
		t.Errorf("log %+v", entries)
	}
	if err := <-ended; err != io.EOF {
		t.Errorf("the destination's connection did not end: %v", err)
	}
}
