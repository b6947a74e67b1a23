package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// Buffer sizes: the sandbox's side reads heads of up to MaxHeaderBytes through a small
// buffer; bodies stream through fixed buffers, never whole.
const (
	clientReadBuf = 16 << 10
	copyBuf       = 32 << 10
)

// maxAddrs bounds how many resolved addresses are checked and tried.
const maxAddrs = 16

// serveConn serves one connection of the sandbox: plain-HTTP requests one after another
// while both ends keep it alive, or one CONNECT tunnel.
func (s *Server) serveConn(c net.Conn) {
	dc := &deadlineConn{Conn: c, idle: s.cfg.IdleTimeout}
	br := bufio.NewReaderSize(dc, clientReadBuf)
	bw := bufio.NewWriterSize(dc, copyBuf)
	for {
		r, err := s.readRequest(dc, br)
		var bad *badRequest
		switch {
		case errors.As(err, &bad):
			s.log.request(Entry{Time: s.cfg.Now(), Method: bad.method, Host: bad.host, Port: bad.port, Reason: "bad request: " + bad.reason})
			s.answer(bw, bad.status, "sbx: the egress proxy refused the request: "+bad.reason+"\n")
			return
		case err != nil:
			return
		case r.Method == http.MethodConnect:
			s.tunnel(c, br, bw, r)
			return
		}
		if !s.forward(dc, br, bw, r) {
			return
		}
	}
}

// answer writes a short text response that closes the connection.
func (s *Server) answer(bw *bufio.Writer, status int, text string) {
	if writeTextResponse(bw, status, text) == nil {
		_ = bw.Flush()
	}
}

func writeTextResponse(w io.Writer, status int, text string) error {
	_, err := fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(text), text)
	return err
}

// decide applies the policy in effect to a request and, when it is refused, logs it and
// answers 403. It returns the policy it used, so that the addresses are checked by the same
// rules, and the log entry to complete.
func (s *Server) decide(bw *bufio.Writer, r *request) (*Policy, Entry, bool) {
	p := s.policy.Load()
	e := Entry{Time: s.cfg.Now(), Method: r.Method, Host: r.host, Port: r.port}
	d := p.Decide(r.host, r.port)
	e.Allowed, e.Rule, e.Preset, e.Reason = d.Allowed, d.Rule, d.Preset, d.Reason
	if !d.Allowed {
		s.log.request(e)
		s.answer(bw, http.StatusForbidden, s.deniedText(r, d, netip.Addr{}))
	}
	return p, e, d.Allowed
}

// connect resolves and connects for an allowed request. On failure it logs the request,
// answers it (403 for a refused address, 502 otherwise) and returns nil.
func (s *Server) connect(bw *bufio.Writer, p *Policy, r *request, e *Entry) net.Conn {
	up, addr, d, err := s.dial(p, r.host, r.port)
	if addr.IsValid() {
		e.Addr = addr.String()
	}
	switch {
	case !d.Allowed:
		e.Allowed, e.Rule, e.Preset, e.Reason = false, d.Rule, d.Preset, d.Reason
		s.log.request(*e)
		s.answer(bw, http.StatusForbidden, s.deniedText(r, d, addr))
		return nil
	case err != nil:
		e.Reason = err.Error()
		s.log.request(*e)
		s.answer(bw, http.StatusBadGateway, fmt.Sprintf("sbx: egress to %s is allowed, but the proxy could not reach it: %s\n", hostPort(r.host, r.port), err))
		return nil
	}
	return up
}

// dial resolves host (unless it is an address), checks every address it gets and connects
// to the first allowed one that answers; it never resolves twice, so what it checked is what
// it connects to. A refused address comes back as a Decision with Allowed false.
func (s *Server) dial(p *Policy, host string, port int) (net.Conn, netip.Addr, Decision, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		// A trailing dot makes the name absolute, so no search domain is ever appended.
		addrs, err = s.cfg.Resolver.LookupNetIP(ctx, "ip", host+".")
		if err != nil {
			return nil, netip.Addr{}, Decision{Allowed: true}, fmt.Errorf("resolving %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, netip.Addr{}, Decision{Allowed: true}, fmt.Errorf("resolving %s: no address", host)
		}
	}
	var (
		allowed []netip.Addr
		refused Decision
		first   netip.Addr
	)
	for _, a := range addrs[:min(len(addrs), maxAddrs)] {
		a = a.WithZone("").Unmap()
		if d := p.CheckAddr(a, port); d.Allowed {
			allowed = append(allowed, a)
		} else if !first.IsValid() {
			refused, first = d, a
		}
	}
	if len(allowed) == 0 {
		return nil, first, refused, nil
	}
	var lastErr error
	for _, a := range allowed {
		c, err := s.cfg.Dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			if !s.track(c, false) {
				c.Close()
				return nil, a, Decision{Allowed: true}, ErrServerClosed
			}
			return c, a, Decision{Allowed: true}, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return nil, a, Decision{Allowed: true}, err
		}
	}
	return nil, allowed[len(allowed)-1], Decision{Allowed: true}, lastErr
}

// deniedText is the body of a 403: who refused, why, and what would allow it.
func (s *Server) deniedText(r *request, d Decision, addr netip.Addr) string {
	name := s.cfg.Sandbox
	if name == "" {
		name = "NAME"
	}
	dest := hostPort(r.host, r.port)
	why := d.Reason
	var fix string
	switch {
	case d.Rule != "":
		why = fmt.Sprintf("the deny entry %q matches", d.Rule)
		fix = "deny entries override every allow rule"
	case addr.IsValid():
		why = r.host + " " + d.Reason
		fix = "allow the address itself with `egress:` in .sbx.yaml or `sbx egress allow " + name + " " + addr.String() + "`"
	default:
		rule := r.host
		if _, err := netip.ParseAddr(r.host); err == nil || r.port != 80 && r.port != 443 {
			rule = dest
		}
		fix = "allow it with `egress:` in .sbx.yaml or `sbx egress allow " + name + " " + rule + "`"
	}
	return fmt.Sprintf("sbx: egress to %s denied by the sandbox's egress allowlist (%s); %s\n", clip(dest, maxLoggedHost), why, fix)
}

// deadlineConn gives every read and write IdleTimeout to make progress (reads at most
// until readBy, when set) and counts bytes. It is for the plain-HTTP path, where reads and
// writes alternate, so a per-call deadline is exactly "no progress for IdleTimeout".
type deadlineConn struct {
	net.Conn
	idle          time.Duration
	readBy        time.Time
	read, written int64
}

func (c *deadlineConn) Read(p []byte) (int, error) {
	d := time.Now().Add(c.idle)
	if !c.readBy.IsZero() && c.readBy.Before(d) {
		d = c.readBy
	}
	_ = c.Conn.SetReadDeadline(d)
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	return n, err
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(p)
	c.written += int64(n)
	return n, err
}
