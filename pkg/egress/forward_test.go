package egress

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// An allowed name that resolves to loopback is reached only because an address rule names
// 127.0.0.1; the request arrives without the proxy's headers, and the log line is exact.
func TestProxyHTTPAllowedByAddressRule(t *testing.T) {
	b := newRawBackend(t, reply)
	px := newProxy(t, File{Allow: []string{fmt.Sprintf("allowed.test:%d", b.port), "127.0.0.1"}}, nil)
	req := fmt.Sprintf("GET http://allowed.test:%d/x?y=1 HTTP/1.1\r\nHost: allowed.test:%[1]d\r\nUser-Agent: t\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nAccept: */*\r\n\r\n", b.port)
	resp, body := px.raw(req)
	if resp.StatusCode != 200 || body != "hello" || resp.Header.Get("X-Backend") != "raw" {
		t.Fatalf("%s %q %v", resp.Status, body, resp.Header)
	}
	wantSent := fmt.Sprintf("GET /x?y=1 HTTP/1.1\r\nHost: allowed.test:%d\r\nUser-Agent: t\r\nConnection: close\r\nAccept: */*\r\n\r\n", b.port)
	if got := b.received(); len(got) != 1 || got[0] != wantSent {
		t.Errorf("backend received %q, want %q", got, wantSent)
	}
	if got := px.resolver.questions(); len(got) != 1 || got[0] != "ip allowed.test." {
		t.Errorf("resolver asked %q", got)
	}
	if got := px.dialer.calls(); len(got) != 1 || got[0] != fmt.Sprintf("127.0.0.1:%d", b.port) {
		t.Errorf("dialed %q", got)
	}
	checkLog(t, px, fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"allowed.test","port":%d,"addr":"127.0.0.1","allowed":true,"rule":"allowed.test:%[1]d","bytesUp":%d,"bytesDown":%d,"durationMs":0}`,
		b.port, len(wantSent), len(reply)))
}

// Without the address rule, the same name is refused after resolution and nothing is dialed.
func TestProxyLoopbackRefusedByDefault(t *testing.T) {
	b := newRawBackend(t, reply)
	px := newProxy(t, File{Allow: []string{fmt.Sprintf("allowed.test:%d", b.port)}}, nil)
	resp, body := px.raw(fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test:%[1]d\r\n\r\n", b.port))
	want := fmt.Sprintf("sbx: egress to allowed.test:%d denied by the sandbox's egress allowlist (allowed.test resolves to 127.0.0.1, a loopback address); allow the address itself with `egress:` in .sbx.yaml or `sbx egress allow web 127.0.0.1`\n", b.port)
	if resp.StatusCode != 403 || body != want {
		t.Errorf("%s %q", resp.Status, body)
	}
	if got := px.dialer.calls(); len(got) != 0 {
		t.Errorf("dialed %q", got)
	}
	checkLog(t, px, fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"allowed.test","port":%d,"addr":"127.0.0.1","allowed":false,"reason":"resolves to 127.0.0.1, a loopback address","bytesUp":0,"bytesDown":0,"durationMs":0}`, b.port))
}

// A real client (Go's) through the proxy to an httptest server, with a body both ways and
// two requests on one kept-alive connection.
func TestProxyHTTPClient(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	px, port := proxyToHandler(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %s %q proxy-conn=%q", r.Method, r.Host, r.URL, body, r.Header.Get("Proxy-Connection")))
		mu.Unlock()
		w.Header().Set("X-Echo", "1")
		fmt.Fprintf(w, "got %d bytes", len(body))
	})
	c := px.client(nil)
	base := fmt.Sprintf("http://allowed.test:%d", port)
	for i, body := range []string{"", strings.Repeat("x", 100000)} {
		var resp *http.Response
		var err error
		if body == "" {
			resp, err = c.Get(base + "/a")
		} else {
			// No length: the client sends it chunked.
			resp, err = c.Post(base+"/b", "text/plain", io.MultiReader(strings.NewReader(body)))
		}
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != fmt.Sprintf("got %d bytes", len(body)) || resp.Header.Get("X-Echo") != "1" {
			t.Errorf("request %d: %s %q", i, resp.Status, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		fmt.Sprintf(`GET allowed.test:%d /a "" proxy-conn=""`, port),
		fmt.Sprintf(`POST allowed.test:%d /b %q proxy-conn=""`, port, strings.Repeat("x", 100000)),
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("backend saw\n%s", strings.Join(seen, "\n"))
	}
	px.close()
	if lines := px.log.lines(); len(lines) != 2 || !strings.Contains(lines[1], `"method":"POST"`) {
		t.Errorf("log %q", lines)
	}
}

// A chunked body with a trailer is forwarded chunked, without the trailer, and the
// connection carries the next request cleanly.
func TestProxyChunkedTrailerKeepAlive(t *testing.T) {
	px, port := proxyToHandler(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s te=%v trailer=%v body=%q", r.URL.Path, r.TransferEncoding, r.Trailer, body)
	})
	c, br := px.dial()
	fmt.Fprintf(c, "POST http://allowed.test:%d/one HTTP/1.1\r\nHost: allowed.test:%[1]d\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n", port)
	fmt.Fprintf(c, "GET http://allowed.test:%d/two HTTP/1.1\r\nHost: allowed.test:%[1]d\r\n\r\n", port)
	for _, want := range []string{`/one te=[chunked] trailer=map[] body="abcde"`, `/two te=[] trailer=map[] body=""`} {
		resp, body := readResponse(t, br, "POST")
		if resp.StatusCode != 200 || body != want {
			t.Errorf("%s %q, want %q", resp.Status, body, want)
		}
	}
}

// Expect: 100-continue is answered by the proxy; an HTTP/1.0 client gets an HTTP/1.0
// response that ends at close.
func TestProxyExpectContinueAndHTTP10(t *testing.T) {
	px, port := proxyToHandler(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.(http.Flusher).Flush() // chunked to the proxy
		fmt.Fprintf(w, "expect=%q body=%q", r.Header.Get("Expect"), body)
	})
	c, br := px.dial()
	fmt.Fprintf(c, "PUT http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test:%[1]d\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n", port)
	if line, _ := br.ReadString('\n'); line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("got %q before the body", line)
	}
	br.ReadString('\n')
	io.WriteString(c, "abc")
	resp, body := readResponse(t, br, "PUT")
	if resp.StatusCode != 200 || body != `expect="" body="abc"` {
		t.Errorf("%s %q", resp.Status, body)
	}
	resp, body = px.raw(fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.0\r\n\r\n", port))
	if resp.Proto != "HTTP/1.0" || len(resp.TransferEncoding) != 0 || !resp.Close || body != `expect="" body=""` {
		t.Errorf("HTTP/1.0: %s %v close=%v %q", resp.Proto, resp.TransferEncoding, resp.Close, body)
	}
}

// A response body that stalls ends after IdleTimeout; the sandbox gets what came, and the
// log says why.
func TestProxyStalledResponse(t *testing.T) {
	const stalled = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"
	b := newRawBackend(t, stalled)
	hold := make(chan struct{})
	defer close(hold)
	b.mu.Lock()
	b.hold = hold
	b.mu.Unlock()
	px := newProxy(t, File{Allow: []string{fmt.Sprintf("allowed.test:%d", b.port), "127.0.0.1"}}, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	c, _ := px.dial()
	fmt.Fprintf(c, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test:%[1]d\r\n\r\n", b.port)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	if string(got) != stalled {
		t.Errorf("got %q, want %q", got, stalled)
	}
	upLen := len(fmt.Sprintf("GET / HTTP/1.1\r\nHost: allowed.test:%d\r\nConnection: close\r\n\r\n", b.port))
	checkLog(t, px, fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"allowed.test","port":%d,"addr":"127.0.0.1","allowed":true,"rule":"allowed.test:%[1]d","reason":"relaying the response: closed after 200ms without traffic","bytesUp":%d,"bytesDown":%d,"durationMs":0}`, b.port, upLen, len(stalled)))
}
