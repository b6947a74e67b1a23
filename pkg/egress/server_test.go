package egress

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A name no rule allows is refused before anything is resolved or dialed, for plain HTTP and
// for CONNECT, with the same text.
func TestProxyDeniedName(t *testing.T) {
	px := newProxy(t, File{Allow: []string{"allowed.test"}, Deny: []string{"bad.allowed.test"}}, nil)
	tests := []struct{ req, text string }{
		{"GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n",
			"sbx: egress to denied.test:80 denied by the sandbox's egress allowlist (no rule allows it); allow it with `egress:` in .sbx.yaml or `sbx egress allow web denied.test`\n"},
		{"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n",
			"sbx: egress to denied.test:443 denied by the sandbox's egress allowlist (no rule allows it); allow it with `egress:` in .sbx.yaml or `sbx egress allow web denied.test`\n"},
		{"CONNECT allowed.test:22 HTTP/1.1\r\n\r\n",
			"sbx: egress to allowed.test:22 denied by the sandbox's egress allowlist (allowed.test allows ports 80 and 443 only, not port 22); allow it with `egress:` in .sbx.yaml or `sbx egress allow web allowed.test:22`\n"},
		{"CONNECT bad.allowed.test:443 HTTP/1.1\r\n\r\n",
			"sbx: egress to bad.allowed.test:443 denied by the sandbox's egress allowlist (the deny entry \"bad.allowed.test\" matches); deny entries override every allow rule\n"},
		{"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
			"sbx: egress to [::1]:443 denied by the sandbox's egress allowlist (no address rule allows it (an address is allowed only by an address or network rule)); allow it with `egress:` in .sbx.yaml or `sbx egress allow web [::1]:443`\n"},
	}
	for _, tt := range tests {
		resp, body := px.raw(tt.req)
		if resp.StatusCode != 403 || body != tt.text || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !resp.Close {
			t.Errorf("%q: %s %q", tt.req, resp.Status, body)
		}
	}
	if q, d := px.resolver.questions(), px.dialer.calls(); len(q) != 0 || len(d) != 0 {
		t.Errorf("resolved %q, dialed %q", q, d)
	}
	line := `{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":%q,"host":%q,"port":%d,"allowed":false,%s"reason":%q,"bytesUp":0,"bytesDown":0,"durationMs":0}`
	checkLog(t, px,
		fmt.Sprintf(line, "GET", "denied.test", 80, "", "no rule allows it"),
		fmt.Sprintf(line, "CONNECT", "denied.test", 443, "", "no rule allows it"),
		fmt.Sprintf(line, "CONNECT", "allowed.test", 22, "", "allowed.test allows ports 80 and 443 only, not port 22"),
		fmt.Sprintf(line, "CONNECT", "bad.allowed.test", 443, `"rule":"bad.allowed.test",`, "a deny entry matches"),
		fmt.Sprintf(line, "CONNECT", "::1", 443, "", "no address rule allows it (an address is allowed only by an address or network rule)"))
}

// The Host header must agree with the request's target; requests that are not proxy
// requests are refused. Nothing is dialed for any of them.
func TestProxyBadRequests(t *testing.T) {
	px := newProxy(t, File{Allow: []string{"allowed.test", "127.0.0.1"}}, nil)
	tests := []struct{ req, reason string }{
		{"GET http://allowed.test/ HTTP/1.1\r\nHost: metadata.test\r\n\r\n", `the Host header "metadata.test" does not agree with the target allowed.test:80`},
		{"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n", `the Host header "allowed.test:8080" does not agree with the target allowed.test:80`},
		{"CONNECT allowed.test:443 HTTP/1.1\r\nHost: metadata.test:443\r\n\r\n", `the Host header "metadata.test:443" does not agree with the target allowed.test:443`},
		{"GET http://allowed.test/ HTTP/1.1\r\n\r\n", "no Host header"},
		{"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "not a proxy request (send the absolute URI, http://HOST/PATH, or CONNECT)"},
		{"GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "https goes through CONNECT, not as an absolute URI"},
		{"GET ftp://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", `scheme "ftp" is not proxied`},
		{"CONNECT allowed.test HTTP/1.1\r\n\r\n", `CONNECT needs HOST:PORT: "allowed.test" has no port`},
		{"GET http://allowed.test/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "malformed: too many Host headers"},
		{"GET http://allowed.test/ HTTP/2.0\r\nHost: allowed.test\r\n\r\n", "only HTTP/1.x is spoken here"},
	}
	for _, tt := range tests {
		resp, body := px.raw(tt.req)
		if resp.StatusCode != 400 || body != "sbx: the egress proxy refused the request: "+tt.reason+"\n" {
			t.Errorf("%q: %s %q", tt.req, resp.Status, body)
		}
	}
	// Spellings of one host agree.
	resp, _ := px.raw("GET http://ALLOWED.test./ HTTP/1.1\r\nHost: allowed.TEST:80\r\n\r\n")
	if resp.StatusCode != 502 { // allowed and dialed; nothing listens on 127.0.0.1:80 here
		t.Errorf("agreeing spellings: %s", resp.Status)
	}
	if d := px.dialer.calls(); len(d) != 1 || d[0] != "127.0.0.1:80" {
		t.Errorf("dialed %q", d)
	}
	px.close()
	lines := px.log.lines()
	if len(lines) != len(tests)+1 {
		t.Fatalf("log %q", lines)
	}
	if want := `{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"allowed.test","port":80,"allowed":false,"reason":"bad request: the Host header \"metadata.test\" does not agree with the target allowed.test:80","bytesUp":0,"bytesDown":0,"durationMs":0}`; lines[0] != want {
		t.Errorf("log line\n got %s\nwant %s", lines[0], want)
	}
}

// A name that resolves to the cloud metadata address is refused; an address rule naming
// 169.254.169.254 lets the proxy dial it (the test dialer then fails, so nothing is reached).
func TestProxyMetadataAddress(t *testing.T) {
	px := newProxy(t, File{Allow: []string{"metadata.test"}}, nil)
	resp, body := px.raw("GET http://metadata.test/latest/meta-data/ HTTP/1.1\r\nHost: metadata.test\r\n\r\n")
	if resp.StatusCode != 403 || !strings.Contains(body, "(metadata.test resolves to 169.254.169.254, a link-local address (where cloud metadata services answer))") {
		t.Errorf("%s %q", resp.Status, body)
	}
	resp, _ = px.raw("CONNECT metadata.test:443 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 403 || len(px.dialer.calls()) != 0 {
		t.Errorf("CONNECT: %s, dialed %q", resp.Status, px.dialer.calls())
	}

	px = newProxy(t, File{Allow: []string{"metadata.test", "169.254.169.254:80"}}, refuseDials)
	resp, body = px.raw("GET http://metadata.test/ HTTP/1.1\r\nHost: metadata.test\r\n\r\n")
	if resp.StatusCode != 502 || body != "sbx: egress to metadata.test:80 is allowed, but the proxy could not reach it: refused by the test dialer\n" {
		t.Errorf("%s %q", resp.Status, body)
	}
	if d := px.dialer.calls(); len(d) != 1 || d[0] != "169.254.169.254:80" {
		t.Errorf("dialed %q", d)
	}
	checkLog(t, px, `{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"metadata.test","port":80,"addr":"169.254.169.254","allowed":true,"rule":"metadata.test","reason":"refused by the test dialer","bytesUp":0,"bytesDown":0,"durationMs":0}`)
}

// Only the allowed addresses of a name are dialed, and a name that does not resolve is a 502.
func TestProxyResolvedAddresses(t *testing.T) {
	px := newProxy(t, File{Allow: []string{"mixed.test", "nxdomain.test"}}, func(c *Config) {
		refuseDials(c)
		c.Resolver.(*fakeResolver).names["mixed.test."] = []netip.Addr{
			netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:203.0.113.80"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("2001:db8::80"),
		}
	})
	resp, _ := px.raw("CONNECT mixed.test:443 HTTP/1.1\r\n\r\n")
	if d := px.dialer.calls(); resp.StatusCode != 502 || strings.Join(d, " ") != "203.0.113.80:443 [2001:db8::80]:443" {
		t.Errorf("%s, dialed %q", resp.Status, d)
	}
	resp, body := px.raw("CONNECT nxdomain.test:443 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 502 || body != "sbx: egress to nxdomain.test:443 is allowed, but the proxy could not reach it: resolving nxdomain.test: lookup nxdomain.test.: no such host\n" {
		t.Errorf("%s %q", resp.Status, body)
	}
}

// A head over MaxHeaderBytes is refused with 431, whether one long line or many.
func TestProxyOversizedHead(t *testing.T) {
	px := newProxy(t, File{Allow: []string{"allowed.test"}}, func(c *Config) { c.MaxHeaderBytes = 1024 })
	for _, extra := range []string{
		"X-Big: " + strings.Repeat("a", 2000) + "\r\n",
		strings.Repeat("X-Many: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 40),
	} {
		resp, body := px.raw("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n" + extra + "\r\n")
		if resp.StatusCode != 431 || body != "sbx: the egress proxy refused the request: its head is larger than 1024 bytes\n" {
			t.Errorf("%s %q", resp.Status, body)
		}
	}
	if d := px.dialer.calls(); len(d) != 0 {
		t.Errorf("dialed %q", d)
	}
	line := `{"time":"2026-12-01T10:00:00Z","sandbox":"web","allowed":false,"reason":"bad request: its head is larger than 1024 bytes","bytesUp":0,"bytesDown":0,"durationMs":0}`
	checkLog(t, px, line, line)
}

// One connection over MaxConns is answered 503 at once.
func TestProxyMaxConns(t *testing.T) {
	px := newProxy(t, File{Allow: []string{"allowed.test"}}, func(c *Config) { c.MaxConns = 1 })
	px.dial() // holds the only slot, waiting for a request
	resp, body := px.raw("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if resp.StatusCode != 503 || body != "sbx: the egress proxy of this sandbox has 1 connections open, its limit; close some and retry\n" {
		t.Errorf("%s %q", resp.Status, body)
	}
	checkLog(t, px, `{"time":"2026-12-01T10:00:00Z","sandbox":"web","allowed":false,"reason":"too many connections (1)","bytesUp":0,"bytesDown":0,"durationMs":0}`)
}

// Idle connections end: one that never sends a request, one whose head stalls, and a tunnel
// without traffic, which is logged with the reason.
func TestProxyTimeouts(t *testing.T) {
	port := tcpBackend(t, func(c net.Conn) { io.Copy(io.Discard, c) }) // silent until closed
	px := newProxy(t, File{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}}, func(c *Config) {
		c.IdleTimeout = 200 * time.Millisecond
		c.HeaderTimeout = 100 * time.Millisecond
	})
	waitClosed := func(c net.Conn) string {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) // far beyond the proxy's timeouts
		b, err := io.ReadAll(c)
		if err != nil {
			t.Errorf("the proxy did not close the connection: %v", err)
		}
		return string(b)
	}
	idle, _ := px.dial()
	if got := waitClosed(idle); got != "" {
		t.Errorf("idle connection got %q", got)
	}
	stalled, _ := px.dial()
	io.WriteString(stalled, "GET http://a/ HTTP/1.1\r\n")
	if got := waitClosed(stalled); !strings.HasPrefix(got, "HTTP/1.1 408 Request Timeout\r\n") {
		t.Errorf("stalled head got %q", got)
	}
	tun, _ := px.dial()
	fmt.Fprintf(tun, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", port)
	if got := waitClosed(tun); got != "HTTP/1.1 200 Connection established\r\n\r\n" {
		t.Errorf("tunnel got %q", got)
	}
	checkLog(t, px,
		`{"time":"2026-12-01T10:00:00Z","sandbox":"web","allowed":false,"reason":"bad request: its head took longer than 100ms","bytesUp":0,"bytesDown":0,"durationMs":0}`,
		fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"CONNECT","host":"127.0.0.1","port":%d,"addr":"127.0.0.1","allowed":true,"rule":"127.0.0.1:%[1]d","reason":"closed after 200ms without traffic","bytesUp":0,"bytesDown":0,"durationMs":0}`, port))
}
