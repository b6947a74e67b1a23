package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent/agenttest"
)

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// upper answers what it read, upper-cased, once its client has ended its side: the relay
// must carry a half-close through.
func upper(c net.Conn) {
	data, err := io.ReadAll(c)
	if err != nil {
		return
	}
	_, _ = c.Write(bytes.ToUpper(data))
}

func TestAgentRelayHalfClose(t *testing.T) {
	a := startHostAgent(t, 0)
	port := agenttest.ServeLoopback(t, upper)
	r, err := DialPort(context.Background(), a.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := bytes.Repeat([]byte("abcdefgh"), 3<<20/8+13) // more than the agent's buffers hold
	go func() {
		_, _ = r.ReadFrom(bytes.NewReader(want))
		_ = r.CloseWrite()
	}()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.ToUpper(want)) {
		t.Fatalf("got %d bytes back, want %d upper-cased", len(got), len(want))
	}
	a.serves(t)
}

// A port nothing listens on is a *ConnectError that says so, and the agent serves on.
func TestAgentRelayRefused(t *testing.T) {
	a := startHostAgent(t, 0)
	port := freePort(t)
	r, err := DialPort(context.Background(), a.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Read(make([]byte, 1))
	var ce *ConnectError
	if !errors.As(err, &ce) || !ce.Refused() || ce.Port != port {
		t.Fatalf("got %v, want a refused *ConnectError for port %d", err, port)
	}
	if want := "nothing listens on port " + strconv.Itoa(port); !strings.Contains(err.Error(), want) {
		t.Errorf("%q does not say %q", err, want)
	}
	r2, err := DialPort(context.Background(), a.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if err := r2.Connected(); !errors.As(err, &ce) || !ce.Refused() {
		t.Errorf("Connected: %v, want a refused *ConnectError", err)
	}
	a.serves(t)
}

// A port that resets the connection resets the relay: the client never takes it for an end.
func TestAgentRelayReset(t *testing.T) {
	a := startHostAgent(t, 0)
	port := agenttest.ServeLoopback(t, func(c net.Conn) {
		// After the client's first byte: a reset before the agent saw the connection made
		// would be a failed connect.
		if _, err := c.Read(make([]byte, 1)); err != nil {
			return
		}
		_, _ = c.Write([]byte("partial"))
		_ = c.(*net.TCPConn).SetLinger(0) // close with RST
	})
	r, err := DialPort(context.Background(), a.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if !errors.Is(err, ErrRelayLost) {
		t.Fatalf("got %q, %v; want ErrRelayLost", got, err)
	}
	a.serves(t)
}

// Many relays at once, each its own connection.
func TestAgentRelayConcurrent(t *testing.T) {
	a := startHostAgent(t, 0)
	port := agenttest.ServeLoopback(t, upper)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := DialPort(context.Background(), a.dir, port)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			msg := strings.Repeat("x", i*1000) + "end" + strconv.Itoa(i)
			if _, err := r.Write([]byte(msg)); err != nil {
				errs <- err
				return
			}
			_ = r.CloseWrite()
			got, err := io.ReadAll(r)
			if err == nil && string(got) != strings.ToUpper(msg) {
				err = errors.New("relay " + strconv.Itoa(i) + " got another answer")
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A port that reads nothing holds up the client, not the agent's memory: the agent stops
// reading the client while HIGH bytes wait.
func TestAgentRelayBounded(t *testing.T) {
	a := startHostAgent(t, 0)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	port := agenttest.ServeLoopback(t, func(net.Conn) { <-hold })
	r, err := DialPort(context.Background(), a.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The writes stop once every buffer on the way is full; the deadline says they have.
	_ = r.c.conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
	n, err := r.ReadFrom(io.LimitReader(zeros{}, 256<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("sent %d bytes to a port that reads nothing: %v", n, err)
	}
	if n > 64<<20 {
		t.Errorf("the agent took %d bytes for a port that reads nothing", n)
	}
	if rss := vmRSS(t, a.cmd.Process.Pid); rss > 64<<20 {
		t.Errorf("the agent holds %d bytes", rss)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func vmRSS(t *testing.T, pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
