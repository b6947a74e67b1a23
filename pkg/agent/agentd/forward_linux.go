package agentd

import (
	"fmt"
	"io"
	"net"
	"strings"
)

// maxForwarded bounds the connections a forward relays at once, each with two 32 KiB
// buffers: more wait in the listener's backlog.
const maxForwarded = 256

// forward listens on spec's "ADDR:PORT" and relays each connection to its Unix socket
// (agent.Forward), in goroutines beside the loop: it holds nothing of the loop's. The
// listener is made before it returns, so nothing in the sandbox runs before it listens.
// It is a convenience of the sandbox's own, not a boundary: whatever may reach the
// address may connect to the socket itself, and what is behind the socket decides. It
// returns the address it listens on.
func forward(spec string, logf func(string, ...any)) (net.Addr, error) {
	addr, socket, ok := strings.Cut(spec, "=")
	if !ok || addr == "" || socket == "" {
		return nil, fmt.Errorf("forward %q is not ADDR:PORT=SOCKET", spec)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	slots := make(chan struct{}, maxForwarded)
	go func() {
		for {
			slots <- struct{}{}
			c, err := l.Accept()
			if err != nil {
				logf("forward %s: %v; it no longer listens", addr, err)
				return
			}
			go func() {
				defer func() { <-slots }()
				relay(c.(*net.TCPConn), socket, logf)
			}()
		}
	}()
	return l.Addr(), nil
}

// relay moves bytes both ways between c and a new connection to socket, passing each
// side's end of data on, until both have ended; a failure on either side closes both.
func relay(c *net.TCPConn, socket string, logf func(string, ...any)) {
	defer c.Close()
	u, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		logf("forward to %s: %v", socket, err)
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	pass := func(dst interface{ CloseWrite() error }, w io.Writer, r io.Reader) {
		if _, err := io.Copy(w, r); err != nil {
			c.SetLinger(0)
			c.Close()
			u.Close()
		}
		_ = dst.CloseWrite()
		done <- struct{}{}
	}
	go pass(u, u, c)
	go pass(c, c, u)
	<-done
	<-done
}
