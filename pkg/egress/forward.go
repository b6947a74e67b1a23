package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strings"
)

// forward proxies one plain-HTTP request over a connection of its own to the destination,
// and reports whether the sandbox's connection may carry another request.
func (s *Server) forward(dc *deadlineConn, br *bufio.Reader, bw *bufio.Writer, r *request) bool {
	p, e, ok := s.decide(bw, r)
	if !ok {
		return false
	}
	up := s.connect(bw, p, r, &e)
	if up == nil {
		return false
	}
	defer s.untrack(up)
	uc := &deadlineConn{Conn: up, idle: s.cfg.IdleTimeout}
	sent := dc.written
	keep, err := s.exchange(dc, uc, bw, r)
	e.BytesUp, e.BytesDown = uc.written, uc.read
	e.DurationMs = s.cfg.Now().Sub(e.Time).Milliseconds()
	if err != nil {
		e.Reason = err.Error()
		s.log.request(e)
		if dc.written == sent && bw.Buffered() == 0 {
			s.answer(bw, http.StatusBadGateway, fmt.Sprintf("sbx: egress to %s is allowed, but it failed: %s\n", hostPort(r.host, r.port), err))
		}
		return false
	}
	s.log.request(e)
	return keep
}

// exchange sends the request upstream and the response back, streaming both bodies.
func (s *Server) exchange(dc, uc *deadlineConn, bw *bufio.Writer, r *request) (keep bool, err error) {
	req := r.Request
	keep = !req.Close
	removeHopByHop(req.Header)
	req.Trailer = nil // chunkedBody drops trailers; announcing them would promise what never comes
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// The proxy answers for the destination, so the client sends its body, which the
		// request below streams; the destination never sees the expectation.
		req.Header.Del("Expect")
		if _, err := io.WriteString(bw, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return false, err
		}
		if err := bw.Flush(); err != nil {
			return false, err
		}
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // Write would add Go's own otherwise
	}
	req.Close = true // one destination connection per request: rules and addresses are checked each time
	ubw := bufio.NewWriterSize(uc, copyBuf)
	if err := req.Write(ubw); err != nil {
		return false, fmt.Errorf("sending the request: %w", err)
	}
	if err := ubw.Flush(); err != nil {
		return false, fmt.Errorf("sending the request: %w", err)
	}
	limit := &headLimit{r: uc, n: int64(s.cfg.MaxHeaderBytes + copyBuf)}
	ubr := bufio.NewReaderSize(limit, copyBuf)
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(ubr, req)
		if err != nil {
			if errors.Is(err, errHeadTooLarge) {
				err = fmt.Errorf("its head is larger than %d bytes", s.cfg.MaxHeaderBytes)
			}
			return false, fmt.Errorf("reading the response: %w", err)
		}
		if resp.StatusCode >= 200 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return false, errors.New("reading the response: 101 Switching Protocols to a request without Upgrade")
		}
		// Other 1xx responses are hints the client did not ask the proxy for; drop them.
	}
	limit.n = -1
	defer resp.Body.Close()
	removeHopByHop(resp.Header)
	chunked := len(resp.TransferEncoding) > 0
	if resp.ContentLength < 0 && !chunked && bodyAllowed(req.Method, resp.StatusCode) {
		keep = false // the body ends when the connection does
	}
	if !req.ProtoAtLeast(1, 1) {
		resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.0", 1, 0
		resp.TransferEncoding = nil // HTTP/1.0 has no chunks: the body ends at close
		keep = false
	}
	resp.Close = !keep
	if chunked || !bodyAllowed(req.Method, resp.StatusCode) {
		if err := resp.Write(bw); err != nil {
			return false, fmt.Errorf("relaying the response: %w", err)
		}
		if err := bw.Flush(); err != nil {
			return false, fmt.Errorf("relaying the response: %w", err)
		}
		return keep, nil
	}
	// A body of known length, or one that ends at close (most downloads): the head goes
	// through the buffer, the body from socket to socket, spliced in the kernel.
	writeHead(bw, resp, !keep)
	early, _ := ubr.Peek(ubr.Buffered())
	if resp.ContentLength >= 0 && int64(len(early)) > resp.ContentLength {
		early = early[:resp.ContentLength] // more than it announced: not the client's
	}
	if _, err := bw.Write(early); err != nil {
		return false, fmt.Errorf("relaying the response: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return false, fmt.Errorf("relaying the response: %w", err)
	}
	rest := int64(-1)
	if resp.ContentLength >= 0 {
		rest = resp.ContentLength - int64(len(early))
	}
	n, err := s.relay(dc.Conn, uc.Conn, rest)
	uc.read += n
	dc.written += n
	if err != nil {
		return false, fmt.Errorf("relaying the response: %w", err)
	}
	return keep, nil
}

// writeHead writes a response's status line and headers for a body of known length (or
// one that ends at close), which follows raw.
func writeHead(w *bufio.Writer, resp *http.Response, close bool) {
	fmt.Fprintf(w, "HTTP/%d.%d %s\r\n", resp.ProtoMajor, resp.ProtoMinor, resp.Status)
	resp.Header.Del("Content-Length")
	if resp.ContentLength >= 0 {
		fmt.Fprintf(w, "Content-Length: %d\r\n", resp.ContentLength)
	}
	if close {
		w.WriteString("Connection: close\r\n")
	}
	_ = resp.Header.Write(w) // a bufio.Writer's error comes back from Flush
	w.WriteString("\r\n")
}

// bodyAllowed reports whether a response may carry a body.
func bodyAllowed(method string, status int) bool {
	return method != http.MethodHead && status != http.StatusNoContent && status != http.StatusNotModified && status >= 200
}

// headLimit fails a read once n bytes came while n is not negative: the response head is
// read through it, the body with n set to -1.
type headLimit struct {
	r io.Reader
	n int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// hopByHop are the headers that describe one connection, not the message, and so are not
// forwarded (RFC 9110, section 7.6.1), with the proxy's own.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}
