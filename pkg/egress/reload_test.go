package egress

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNewServerRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "rules.json")
	if err := WriteFile(good, File{Allow: []string{"pypi.org"}}); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := writeFileRaw(bad, `{"version":1,"allow":["@x"]}`); err != nil {
		t.Fatal(err)
	}
	r, d := &fakeResolver{}, &recordingDialer{}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Resolver: r, Dialer: d}, "egress proxy: no rules file"},
		{Config{RulesFile: good, Dialer: d}, "egress proxy: a resolver and a dialer are required"},
		{Config{RulesFile: bad, Resolver: r, Dialer: d}, `egress proxy: ` + bad + `: allow: egress rule "@x": unknown preset`},
		{Config{RulesFile: filepath.Join(dir, "none"), Resolver: r, Dialer: d}, "no such file"},
	} {
		if _, err := NewServer(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("got %v, want %q", err, tt.want)
		}
	}
	srv, err := NewServer(Config{RulesFile: good, Resolver: r, Dialer: d})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	if err := srv.Serve(l); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
}

// A changed rules file takes effect at the next poll, without a restart; a bad one keeps
// the rules in effect, and both are logged once.
func TestProxyReloadOnPoll(t *testing.T) {
	b := newRawBackend(t, reply)
	px := newProxy(t, File{Allow: []string{"other.test"}}, nil)
	get := fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test:%[1]d\r\n\r\n", b.port)
	if resp, _ := px.raw(get); resp.StatusCode != 403 {
		t.Fatalf("before: %s", resp.Status)
	}
	// The second tick waits until the first was handled. The poll the second starts may
	// itself see the next change first; either way one poll reloads it, once.
	poll := func() { px.poll <- time.Time{}; px.poll <- time.Time{} }
	poll() // unchanged: nothing is read or logged
	if err := WriteFile(px.rules, File{Allow: []string{fmt.Sprintf("allowed.test:%d", b.port), "127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	poll()
	if resp, body := px.raw(get); resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("after: %s %q", resp.Status, body)
	}
	px.log.waitLines(t, 3)
	if err := writeFileRaw(px.rules, `{"version": 1, "allow": ["@nope"]}`); err != nil {
		t.Fatal(err)
	}
	poll()
	poll()
	if resp, _ := px.raw(get); resp.StatusCode != 200 {
		t.Errorf("a bad file changed the rules: %s", resp.Status)
	}
	upLen := len(fmt.Sprintf("GET / HTTP/1.1\r\nHost: allowed.test:%d\r\nConnection: close\r\n\r\n", b.port))
	allowed := fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"allowed.test","port":%d,"addr":"127.0.0.1","allowed":true,"rule":"allowed.test:%[1]d","bytesUp":%d,"bytesDown":%d,"durationMs":0}`, b.port, upLen, len(reply))
	checkLog(t, px,
		fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"allowed.test","port":%d,"allowed":false,"reason":"no rule allows it","bytesUp":0,"bytesDown":0,"durationMs":0}`, b.port),
		`{"time":"2026-12-01T10:00:00Z","sandbox":"web","event":"reload","rules":2}`,
		allowed,
		fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","event":"reload","error":"%s: allow: egress rule \"@nope\": unknown preset; keeping the previous rules"}`, px.rules),
		allowed)
}

// Reload reads the file at once, whether it changed or not, and reports a bad one.
func TestProxyReloadExplicit(t *testing.T) {
	px := newProxy(t, File{Allow: []string{"allowed.test"}}, nil)
	if err := writeFileRaw(px.rules, `{"version": 1, "allow": ["@nope"]}`); err != nil {
		t.Fatal(err)
	}
	if err := px.srv.Reload(); err == nil || !strings.Contains(err.Error(), "unknown preset") {
		t.Errorf("Reload: %v", err)
	}
	if d := px.srv.Policy().Decide("allowed.test", 443); !d.Allowed {
		t.Errorf("a bad file changed the rules: %+v", d)
	}
	if err := WriteFile(px.rules, File{Allow: []string{"other.test"}, Deny: []string{"bad.test"}}); err != nil {
		t.Fatal(err)
	}
	if err := px.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := px.srv.Reload(); err != nil { // unchanged, read again all the same
		t.Fatal(err)
	}
	if resp, _ := px.raw("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); resp.StatusCode != 403 {
		t.Errorf("after Reload: %s", resp.Status)
	}
	checkLog(t, px,
		fmt.Sprintf(`{"time":"2026-12-01T10:00:00Z","sandbox":"web","event":"reload","error":"%s: allow: egress rule \"@nope\": unknown preset; keeping the previous rules"}`, px.rules),
		`{"time":"2026-12-01T10:00:00Z","sandbox":"web","event":"reload","rules":2}`,
		`{"time":"2026-12-01T10:00:00Z","sandbox":"web","event":"reload","rules":2}`,
		`{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"allowed.test","port":80,"allowed":false,"reason":"no rule allows it","bytesUp":0,"bytesDown":0,"durationMs":0}`)
}
