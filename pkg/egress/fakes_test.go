package egress

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder keeps what a fake was asked, for any goroutine.
type recorder struct {
	mu   sync.Mutex
	list []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, s)
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.list...)
}

// fakeResolver answers from a map, never from DNS.
type fakeResolver struct {
	names map[string][]netip.Addr
	asked recorder
}

func (r *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.asked.add(network + " " + host)
	if addrs, ok := r.names[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) questions() []string { return r.asked.all() }

// recordingDialer dials loopback for real and records every address it was asked for;
// with refuse it fails instead, for destinations a test must not really reach.
type recordingDialer struct {
	dialed recorder
	refuse bool
}

func (d *recordingDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.dialed.add(address)
	if d.refuse {
		return nil, errors.New("refused by the test dialer")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (d *recordingDialer) calls() []string { return d.dialed.all() }

// refuseDials makes a proxy's test dialer fail every dial; a tune function of newProxy runs
// before the proxy serves, so no request sees the change half made.
func refuseDials(c *Config) { c.Dialer.(*recordingDialer).refuse = true }

// syncBuffer is the decision log of a proxy under test.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

// waitLines waits until the log has n lines: the proxy logs a request after answering it.
func (b *syncBuffer) waitLines(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for len(b.lines()) < n {
		select {
		case <-b.changed:
		case <-timeout:
			t.Fatalf("the log has %d lines, want %d", len(b.lines()), n)
		}
	}
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSuffix(b.buf.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
