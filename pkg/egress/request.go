package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"time"
)

// request is a parsed request and the destination it names.
type request struct {
	*http.Request
	host string // as the client named it, in canonicalHost's form
	port int
}

// badRequest is a request the proxy answers with an error status before any decision.
type badRequest struct {
	status int
	reason string
	method string
	host   string
	port   int
}

func (e *badRequest) Error() string { return e.reason }

// errGone is a connection that ended between requests, or was closed mid-head: nothing to
// answer and nothing to log.
var errGone = errors.New("connection closed")

// readRequest reads one request's head within the limits and checks what it names. The
// first byte may take IdleTimeout (a kept-alive connection waits for its next request);
// the rest of the head must come within HeaderTimeout.
func (s *Server) readRequest(dc *deadlineConn, br *bufio.Reader) (*request, error) {
	dc.readBy = time.Time{}
	if _, err := br.Peek(1); err != nil {
		return nil, errGone
	}
	dc.readBy = time.Now().Add(s.cfg.HeaderTimeout)
	head, err := readHead(br, s.cfg.MaxHeaderBytes)
	dc.readBy = time.Time{}
	switch {
	case errors.Is(err, errHeadTooLarge):
		return nil, &badRequest{status: http.StatusRequestHeaderFieldsTooLarge, reason: fmt.Sprintf("its head is larger than %d bytes", s.cfg.MaxHeaderBytes)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &badRequest{status: http.StatusRequestTimeout, reason: fmt.Sprintf("its head took longer than %s", s.cfg.HeaderTimeout)}
	case err != nil:
		return nil, errGone
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return nil, &badRequest{status: http.StatusBadRequest, reason: "malformed: " + err.Error()}
	}
	// ReadRequest drops the Host header of an absolute-form request; it is read again here
	// because it must agree with the URI.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	_, _ = tp.ReadLine()
	mh, _ := tp.ReadMIMEHeader()
	hostHeader, hasHost := mh["Host"]
	r := &request{Request: req}
	bad := func(reason string) (*request, error) {
		return nil, &badRequest{status: http.StatusBadRequest, reason: reason, method: req.Method, host: r.host, port: r.port}
	}
	if req.ProtoMajor != 1 {
		return bad("only HTTP/1.x is spoken here")
	}
	if req.Method == http.MethodConnect {
		h, p, err := splitAuthority(req.RequestURI, 0)
		if err != nil {
			return bad("CONNECT needs HOST:PORT: " + err.Error())
		}
		r.host, r.port = canonicalHost(h), p
	} else {
		switch req.URL.Scheme {
		case "http":
		case "":
			return bad("not a proxy request (send the absolute URI, http://HOST/PATH, or CONNECT)")
		case "https":
			return bad("https goes through CONNECT, not as an absolute URI")
		default:
			return bad(fmt.Sprintf("scheme %q is not proxied", req.URL.Scheme))
		}
		h, p, err := splitAuthority(req.URL.Host, 80)
		if err != nil {
			return bad("the URI's host: " + err.Error())
		}
		r.host, r.port = canonicalHost(h), p
		if !hasHost && req.ProtoAtLeast(1, 1) {
			return bad("no Host header")
		}
	}
	if hasHost {
		h, p, err := splitAuthority(hostHeader[0], r.port)
		if err != nil || canonicalHost(h) != r.host || p != r.port {
			return bad(fmt.Sprintf("the Host header %q does not agree with the target %s", clip(hostHeader[0], maxLoggedHost), hostPort(r.host, r.port)))
		}
	}
	switch {
	case req.Method == http.MethodConnect:
		req.Body = http.NoBody
	case len(req.TransferEncoding) > 0:
		req.Body = &chunkedBody{r: httputil.NewChunkedReader(br), br: br, max: s.cfg.MaxHeaderBytes}
	case req.ContentLength > 0:
		req.Body = io.NopCloser(io.LimitReader(br, req.ContentLength))
	default:
		req.Body, req.ContentLength = http.NoBody, 0
	}
	return r, nil
}

var errHeadTooLarge = errors.New("request head too large")

// readHead reads a request line and headers up to and including the empty line, at most
// max bytes. Empty lines before the request line are skipped (RFC 9112, section 2.2) but
// count towards max.
func readHead(br *bufio.Reader, max int) ([]byte, error) {
	return readLines(br, max, true)
}

// readLines reads lines up to and including an empty one, at most max bytes; skipLeading
// passes over empty lines before the first.
func readLines(br *bufio.Reader, max int, skipLeading bool) ([]byte, error) {
	var (
		head      []byte
		total     int
		lineStart = true
	)
	for {
		line, err := br.ReadSlice('\n')
		total += len(line)
		if total > max {
			return nil, errHeadTooLarge
		}
		blank := lineStart && err == nil && (string(line) == "\r\n" || string(line) == "\n")
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			head = append(head, line...)
			lineStart = false
			continue
		case err != nil:
			return nil, err
		case blank && len(head) == 0 && skipLeading:
		case blank:
			return append(head, line...), nil
		default:
			head = append(head, line...)
		}
		lineStart = true
	}
}

// chunkedBody is a chunked request body read from the connection; at its end it consumes
// the trailer section (bounded, and not forwarded), so the next request starts clean.
type chunkedBody struct {
	r   io.Reader
	br  *bufio.Reader
	max int
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		if _, terr := readLines(b.br, b.max, false); terr != nil {
			return n, fmt.Errorf("reading the request's trailer: %w", terr)
		}
	}
	return n, err
}

func (b *chunkedBody) Close() error { return nil }

// splitAuthority splits HOST[:PORT] (IPv6 in brackets), using defPort when no port is
// given; defPort 0 makes the port required.
func splitAuthority(s string, defPort int) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		if defPort == 0 || strings.HasSuffix(s, ":") {
			return "", 0, fmt.Errorf("%q has no port", clip(s, maxLoggedHost))
		}
		h, p = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), strconv.Itoa(defPort)
	}
	port, ok := parsePort(p)
	if !ok || h == "" {
		return "", 0, fmt.Errorf("%q is not HOST:PORT", clip(s, maxLoggedHost))
	}
	return h, port, nil
}

// canonicalHost is the form two spellings of one host share: an address as netip prints
// it, a name lower-case without its trailing dot.
func canonicalHost(h string) string {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// hostPort joins a host and port, bracketing IPv6.
func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
