package portforward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/agent/agenttest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestParseSpec(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Spec
		err  string
	}{
		{"8000", Spec{"127.0.0.1", 8000, 8000}, ""},
		{"0:8000", Spec{"127.0.0.1", 0, 8000}, ""},
		{"9000:8000", Spec{"127.0.0.1", 9000, 8000}, ""},
		{"0.0.0.0:9000:8000", Spec{"0.0.0.0", 9000, 8000}, ""},
		{"[::1]:0:80", Spec{"::1", 0, 80}, ""},
		{"localhost:0:80", Spec{"localhost", 0, 80}, ""},
		{"0", Spec{}, `remote port "0" is not a port (1-65535)`},
		{"80:0", Spec{}, `remote port "0" is not a port`},
		{"65536", Spec{}, `remote port "65536" is not a port`},
		{"x:80", Spec{}, `local port "x" is not a port (1-65535, or 0 for a free one)`},
		{"080", Spec{}, `remote port "080" is not a port`},
		{":0:80", Spec{}, "an empty address"},
	} {
		got, err := ParseSpec(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: got %+v, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	if !(Spec{Addr: "127.0.0.1"}).Loopback() || !(Spec{Addr: "::1"}).Loopback() || (Spec{Addr: "0.0.0.0"}).Loopback() {
		t.Error("Loopback is wrong")
	}
}

// inside is a server standing for the port inside a sandbox; dial connects to it over TCP,
// which half-closes as a relay does.
func inside(t *testing.T, h func(net.Conn)) Dialer {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", agenttest.ServeLoopback(t, h))
	return func(ctx context.Context, port int) (Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return tcpConn{c.(*net.TCPConn)}, nil
	}
}

// tcpConn is a TCP connection standing for a relay whose connection inside was made.
type tcpConn struct{ *net.TCPConn }

func (tcpConn) Connected() error { return nil }

func upper(c net.Conn) {
	data, _ := io.ReadAll(c)
	_, _ = c.Write(bytes.ToUpper(data))
}

func serve(t *testing.T, dial Dialer) (*Forward, chan error, context.CancelFunc, chan error) {
	t.Helper()
	fws, err := Listen(context.Background(), []Spec{{Addr: DefaultAddr, Remote: 80}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan error, 100)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, fws[0], dial, func(err error) { reports <- err }) }()
	t.Cleanup(func() { cancel(); <-done })
	return fws[0], reports, cancel, done
}

func roundTrip(fw *Forward, msg string) (string, error) {
	c, err := net.Dial("tcp", net.JoinHostPort(fw.Host(), fmt.Sprint(fw.Port())))
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	return string(got), err
}

// Every connection is relayed with its half-close, many at once, and ending the context
// closes the listener.
func TestServeRelaysAndStops(t *testing.T) {
	fw, reports, cancel, done := serve(t, inside(t, upper))
	if fw.Port() == 0 || !strings.HasPrefix(fw.URL(), "http://127.0.0.1:") {
		t.Fatalf("port %d, URL %s", fw.Port(), fw.URL())
	}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := strings.Repeat("ab", i*100) + fmt.Sprint(i)
			if got, err := roundTrip(fw, msg); err != nil || got != strings.ToUpper(msg) {
				t.Errorf("connection %d: got %d bytes, %v", i, len(got), err)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-reports:
		t.Errorf("reported %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the cleanup
	if _, err := net.Dial("tcp", net.JoinHostPort(fw.Host(), fmt.Sprint(fw.Port()))); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after the end: %v, want connection refused", err)
	}
}

// A connection that cannot be made inside is reported and closed; the next one is served.
func TestServeReportsRefusedAndServesOn(t *testing.T) {
	good := inside(t, upper)
	var mu sync.Mutex
	refuse := true
	fw, reports, _, _ := serve(t, func(ctx context.Context, port int) (Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			refuse = false
			return nil, errors.New("nothing listens on port 80 inside the sandbox (connection refused)")
		}
		return good(ctx, port)
	})
	if got, err := roundTrip(fw, "x"); got != "" {
		t.Errorf("a refused connection got %q, %v", got, err)
	}
	if err := <-reports; !strings.Contains(err.Error(), "to port 80: nothing listens") {
		t.Errorf("reported %v", err)
	}
	if got, err := roundTrip(fw, "again"); err != nil || got != "AGAIN" {
		t.Errorf("after the refusal: %q, %v", got, err)
	}
}

// A port in use fails with exit 1 and a hint, and releases what it listened on before.
func TestListenPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p := busy.Addr().(*net.TCPAddr).Port
	_, err = Listen(context.Background(), []Spec{{Addr: DefaultAddr, Remote: 1}, {Addr: DefaultAddr, Local: p, Remote: 2}})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("cannot listen on 127.0.0.1:%d: the port is in use", p)) ||
		errs.ExitCode(err) != 1 || !strings.Contains(errs.Hint(err), "0 for a free one") {
		t.Fatalf("got %v (exit %d, hint %q)", err, errs.ExitCode(err), errs.Hint(err))
	}
}

// refusedConn is a connection the agent could not make: its first read says so.
type refusedConn struct{}

type refusedErr struct{}

func (refusedErr) Error() string {
	return "nothing listens on port 80 inside the sandbox (connection refused)"
}
func (refusedErr) Refused() bool { return true }

func (refusedConn) Read([]byte) (int, error)    { return 0, refusedErr{} }
func (refusedConn) Write(p []byte) (int, error) { return len(p), nil }
func (refusedConn) Close() error                { return nil }
func (refusedConn) CloseWrite() error           { return nil }
func (refusedConn) Connected() error            { return refusedErr{} }

// A connection refused inside, learnt only once the relay runs, is reported too, and the
// client's connection is dropped.
func TestServeReportsRefusedOnRead(t *testing.T) {
	fw, reports, _, _ := serve(t, func(context.Context, int) (Conn, error) { return refusedConn{}, nil })
	if got, err := roundTrip(fw, "x"); got != "" || err == nil {
		t.Errorf("a refused connection got %q, %v", got, err)
	}
	var cf ConnectFailure
	if err := <-reports; !errors.As(err, &cf) || !strings.Contains(err.Error(), "nothing listens on port 80") {
		t.Errorf("reported %v", err)
	}
}
