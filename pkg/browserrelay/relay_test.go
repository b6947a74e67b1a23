package browserrelay_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/browserrelay"
)

const token = "00112233445566778899aabbccddeeff0011223344556677"

// backend fakes Chromium's DevTools server: /json listings naming its own address, a
// WebSocket that echoes what it is sent, and a record of every request that reached it.
type backend struct {
	addr string
	mu   sync.Mutex
	seen []*http.Request
	// listing, when set, is the body of /json/list.
	listing string
}

func (b *backend) requests() []*http.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*http.Request(nil), b.seen...)
}

func newBackend(t *testing.T) *backend {
	b := &backend{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, r)
		b.mu.Unlock()
		switch r.URL.Path {
		case "/json/version", "/json/version/":
			w.Header().Set("Content-Type", "application/json; charset=UTF-8")
			fmt.Fprintf(w, `{"Browser": "Chrome/120.0.6099.224", "Protocol-Version": "1.3", "webSocketDebuggerUrl": "ws://%s/devtools/browser/77aa"}`, r.Host)
		case "/json/list":
			body := b.listing
			if body == "" {
				body = fmt.Sprintf(`[{"id": "P1", "type": "page", "title": "a&b", "devtoolsFrontendUrl": "/devtools/inspector.html?ws=%[1]s/devtools/page/P1",
"devtoolsFrontendUrlCompat": "https://chrome-devtools-frontend.appspot.com/serve_rev/@1/inspector.html?ws=%[1]s/devtools/page/P1",
"webSocketDebuggerUrl": "ws://%[1]s/devtools/page/P1"}]`, r.Host)
			}
			_, _ = io.WriteString(w, body)
		case "/devtools/browser/77aa":
			if r.Header.Get("Upgrade") != "websocket" {
				http.Error(w, "not a websocket", http.StatusBadRequest)
				return
			}
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			_ = rw.Flush()
			line, _ := rw.ReadString('\n')
			_, _ = rw.WriteString("echo " + line)
			_ = rw.Flush()
		case "/vnc.html":
			_, _ = io.WriteString(w, "<title>noVNC</title>")
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

// relay serves a relay to b on loopback and returns its address.
func relay(t *testing.T, b *backend, cdp bool) string {
	t.Helper()
	h, err := browserrelay.New(token, b.addr, cdp)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- browserrelay.Serve(ctx, l, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String()
}

func get(t *testing.T, raw string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestRefusedWithoutToken(t *testing.T) {
	b := newBackend(t)
	addr := relay(t, b, true)
	wrong := strings.Repeat("0", len(token))
	for _, c := range []struct {
		path   string
		header http.Header
	}{
		{path: "/json/version"},
		{path: "/json/list"},
		{path: "/" + wrong + "/json/version"},
		{path: "/" + token[:47] + "/json/version"},
		{path: "/" + token + "x/json/version"},
		{path: "/x/" + token + "/json/version"},
		{path: "/json/version?token=" + token},
		{path: "/json/version", header: http.Header{"Authorization": {"Bearer " + wrong}}},
		{path: "/json/version", header: http.Header{"Authorization": {"Basic " + token}}},
		{path: "/json/version", header: http.Header{"Authorization": {token}}},
		{path: "/devtools/browser/77aa", header: http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}},
	} {
		resp, body := get(t, "http://"+addr+c.path, c.header)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" || strings.Contains(body, "Chrome") {
			t.Errorf("%s %v: %s %q", c.path, c.header, resp.Status, body)
		}
	}
	if seen := b.requests(); len(seen) != 0 {
		t.Errorf("%d requests reached the browser, the first %s", len(seen), seen[0].URL)
	}
}

func TestTokenInPath(t *testing.T) {
	b := newBackend(t)
	addr := relay(t, b, true)
	for _, path := range []string{"/json/version", "/json/version/"} {
		resp, body := get(t, "http://"+addr+"/"+token+path, http.Header{"Accept-Encoding": {"gzip"}})
		var v map[string]string
		if err := json.Unmarshal([]byte(body), &v); resp.StatusCode != 200 || err != nil {
			t.Fatalf("%s: %s %v %s", path, resp.Status, err, body)
		}
		if want := "ws://" + addr + "/" + token + "/devtools/browser/77aa"; v["webSocketDebuggerUrl"] != want || v["Browser"] != "Chrome/120.0.6099.224" || v["Protocol-Version"] != "1.3" {
			t.Errorf("%s: %v, want webSocketDebuggerUrl %s", path, v, want)
		}
		if resp.ContentLength != int64(len(body)) {
			t.Errorf("Content-Length %d for %d bytes", resp.ContentLength, len(body))
		}
	}
	seen := b.requests()
	if len(seen) != 2 {
		t.Fatalf("%d requests reached the browser", len(seen))
	}
	for _, r := range seen {
		if r.Host != b.addr || strings.Contains(r.URL.String(), token) {
			t.Errorf("the browser got Host %q, URL %s", r.Host, r.URL)
		}
	}
}

func TestBearerToken(t *testing.T) {
	b := newBackend(t)
	addr := relay(t, b, true)
	resp, body := get(t, "http://"+addr+"/json/version", http.Header{"Authorization": {"Bearer " + token}})
	// Laid out as Chromium lays it out, for clients that read it as text.
	if resp.StatusCode != 200 || !strings.Contains(body, `"webSocketDebuggerUrl": "ws://`+addr+"/"+token+`/devtools/browser/77aa"`) || !strings.Contains(body, `"Browser": "Chrome/`) {
		t.Errorf("%s %s", resp.Status, body)
	}
	if seen := b.requests(); len(seen) != 1 || seen[0].Header.Get("Authorization") != "" || seen[0].URL.Path != "/json/version" {
		t.Errorf("the browser got %v", seen)
	}
}

func TestListingRewritten(t *testing.T) {
	b := newBackend(t)
	addr := relay(t, b, true)
	resp, body := get(t, "http://localhost:"+portOf(addr)+"/"+token+"/json/list", nil)
	var list []map[string]string
	if err := json.Unmarshal([]byte(body), &list); resp.StatusCode != 200 || err != nil || len(list) != 1 {
		t.Fatalf("%s %v %s", resp.Status, err, body)
	}
	host := "localhost:" + portOf(addr)
	e := list[0]
	if e["webSocketDebuggerUrl"] != "ws://"+host+"/"+token+"/devtools/page/P1" || e["title"] != "a&b" || e["id"] != "P1" {
		t.Errorf("entry %v", e)
	}
	for field, want := range map[string]string{
		"devtoolsFrontendUrl":       "/" + token + "/devtools/inspector.html",
		"devtoolsFrontendUrlCompat": "https://chrome-devtools-frontend.appspot.com/serve_rev/@1/inspector.html",
	} {
		u, err := url.Parse(e[field])
		if err != nil || u.Scheme+schemeSep(u)+u.Host+u.Path != want || u.Query().Get("ws") != host+"/"+token+"/devtools/page/P1" {
			t.Errorf("%s = %s, want %s?ws=%s/%s/devtools/page/P1", field, e[field], want, host, token)
		}
	}
}

func schemeSep(u *url.URL) string {
	if u.Scheme != "" {
		return "://"
	}
	return ""
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func TestListingBounded(t *testing.T) {
	b := newBackend(t)
	b.listing = "[" + strings.Repeat(`{"id": "x"},`, 4<<20/12) + `{"id": "x"}]`
	addr := relay(t, b, true)
	if resp, body := get(t, "http://"+addr+"/"+token+"/json/list", nil); resp.StatusCode != http.StatusBadGateway || len(body) > 200 {
		t.Errorf("a listing over the bound: %s, %d bytes", resp.Status, len(body))
	}
	b.listing = `[{"webSocketDebuggerUrl": 1}]`
	if resp, _ := get(t, "http://"+addr+"/"+token+"/json/list", nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a listing the relay cannot read: %s", resp.Status)
	}
}

func TestHeaderBounded(t *testing.T) {
	b := newBackend(t)
	addr := relay(t, b, true)
	resp, _ := get(t, "http://"+addr+"/"+token+"/json/version", http.Header{"X-Big": {strings.Repeat("a", browserrelay.MaxHeaderBytes*2)}})
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || len(b.requests()) != 0 {
		t.Errorf("a header over the bound: %s, %d forwarded", resp.Status, len(b.requests()))
	}
}

func TestWebSocketThrough(t *testing.T) {
	b := newBackend(t)
	addr := relay(t, b, true)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /%s/devtools/browser/77aa HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", token, addr)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	fmt.Fprint(conn, "hello\n")
	if line, err := r.ReadString('\n'); err != nil || line != "echo hello\n" {
		t.Errorf("through the upgraded connection: %q %v", line, err)
	}
}

// The noVNC relay forwards pages as they are: only CDP listings are rewritten.
func TestNoVNCRelay(t *testing.T) {
	b := newBackend(t)
	addr := relay(t, b, false)
	if resp, body := get(t, "http://"+addr+"/vnc.html", nil); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "noVNC") {
		t.Errorf("without the token: %s %s", resp.Status, body)
	}
	if resp, body := get(t, "http://"+addr+"/"+token+"/vnc.html?path="+token+"/websockify", nil); resp.StatusCode != 200 || body != "<title>noVNC</title>" {
		t.Errorf("with it: %s %s", resp.Status, body)
	}
	if _, body := get(t, "http://"+addr+"/"+token+"/json/version", nil); !strings.Contains(body, "ws://"+b.addr+"/devtools/") {
		t.Errorf("a listing through the noVNC relay was rewritten: %s", body)
	}
	if seen := b.requests(); len(seen) != 2 || seen[0].URL.RawQuery != "path="+token+"/websockify" {
		t.Errorf("the backend got %v", seen)
	}
}

func TestTokens(t *testing.T) {
	a, err := browserrelay.NewToken(nil)
	if err != nil || !browserrelay.ValidToken(a) {
		t.Fatalf("%q %v", a, err)
	}
	if b, _ := browserrelay.NewToken(nil); b == a {
		t.Error("two tokens alike")
	}
	if _, err := browserrelay.NewToken(strings.NewReader("short")); err == nil {
		t.Error("a token from a short source")
	}
	for _, bad := range []string{"", token[:47], token + "0", strings.Repeat("g", 48), strings.ToUpper(token)[:47] + "/"} {
		if browserrelay.ValidToken(bad) {
			t.Errorf("ValidToken(%q)", bad)
		}
		if _, err := browserrelay.New(bad, "127.0.0.1:1", true); err == nil {
			t.Errorf("New with token %q", bad)
		}
	}
}
