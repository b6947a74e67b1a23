package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The clock of every proxy under test: log lines are exact, durations 0.
var testNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type proxyFixture struct {
	t        testing.TB
	srv      *Server
	addr     string
	rules    string
	log      *syncBuffer
	resolver *fakeResolver
	dialer   *recordingDialer
	poll     chan time.Time
	served   chan error
}

// newProxy starts a proxy for sandbox "web" on loopback with the given rules; allowed.test
// and metadata.test resolve to 127.0.0.1 and 169.254.169.254.
func newProxy(t testing.TB, f File, tune func(*Config)) *proxyFixture {
	t.Helper()
	px := &proxyFixture{
		t:     t,
		rules: filepath.Join(t.TempDir(), "rules.json"),
		log:   &syncBuffer{changed: make(chan struct{}, 1)},
		resolver: &fakeResolver{names: map[string][]netip.Addr{
			"allowed.test.":  {netip.MustParseAddr("127.0.0.1")},
			"metadata.test.": {netip.MustParseAddr("169.254.169.254")},
		}},
		dialer: &recordingDialer{},
		poll:   make(chan time.Time),
		served: make(chan error, 1),
	}
	if err := WriteFile(px.rules, f); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Sandbox: "web", RulesFile: px.rules, Resolver: px.resolver, Dialer: px.dialer,
		Log: px.log, Now: func() time.Time { return testNow }, Poll: px.poll,
	}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px.srv, px.addr = srv, l.Addr().String()
	go func() { px.served <- srv.Serve(l) }()
	t.Cleanup(func() { px.close() })
	return px
}

// close stops the proxy, after which every log line is written.
func (px *proxyFixture) close() {
	px.t.Helper()
	if err := px.srv.Close(); err != nil {
		px.t.Errorf("Close: %v", err)
	}
	if err := <-px.served; !errors.Is(err, ErrServerClosed) {
		px.t.Errorf("Serve returned %v", err)
	}
	px.served <- ErrServerClosed // a second close finds it again
}

// client is an HTTP client that goes through the proxy, trusting tlsServer's certificate
// (httptest's, issued for example.com) when given.
func (px *proxyFixture) client(tlsServer *httptest.Server) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: px.addr})}
	if tlsServer != nil {
		tr.TLSClientConfig = tlsServer.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tr.TLSClientConfig.ServerName = "example.com"
	}
	px.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// dial opens a connection to the proxy, closed when the test ends.
func (px *proxyFixture) dial() (net.Conn, *bufio.Reader) {
	px.t.Helper()
	c, err := net.Dial("tcp", px.addr)
	if err != nil {
		px.t.Fatal(err)
	}
	px.t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// raw sends text on a new connection to the proxy and reads one response.
func (px *proxyFixture) raw(text string) (*http.Response, string) {
	px.t.Helper()
	c, br := px.dial()
	defer c.Close()
	if _, err := io.WriteString(c, text); err != nil {
		px.t.Fatal(err)
	}
	return readResponse(px.t, br, text)
}

// proxyToHandler starts an httptest server with h and a proxy that allows allowed.test on
// its port, and 127.0.0.1, the address allowed.test resolves to.
func proxyToHandler(t *testing.T, h http.HandlerFunc) (*proxyFixture, int) {
	t.Helper()
	backend := httptest.NewServer(h)
	t.Cleanup(backend.Close)
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	return newProxy(t, File{Allow: []string{fmt.Sprintf("allowed.test:%d", port), "127.0.0.1"}}, nil), port
}

func readResponse(t testing.TB, br *bufio.Reader, sent string) (*http.Response, string) {
	t.Helper()
	method, _, _ := strings.Cut(sent, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodConnect && resp.StatusCode == 200 {
		return resp, "" // what follows is the tunnel's
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func checkLog(t *testing.T, px *proxyFixture, want ...string) {
	t.Helper()
	px.close()
	got := px.log.lines()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// writeFileRaw replaces a rules file by rename with text sbx would never write.
func writeFileRaw(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
