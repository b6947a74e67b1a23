// Package browserrelay is the gate in front of a browser sandbox's DevTools and noVNC ports:
// an HTTP reverse proxy that forwards only requests carrying the sandbox's token, as the
// first segment of the path (http://HOST/TOKEN/json/version) or as "Authorization: Bearer
// TOKEN". The ports are published on the host's loopback, and the sandbox's address on its
// bridge is reachable from the host too, so any local user could otherwise drive the
// browser. The token is the only secret: the relay logs neither it nor the paths it sees.
package browserrelay

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// tokenBytes is the token's entropy: 192 bits, as Jupyter's, written as 48 hex digits so it
// needs no escaping in a path or a query.
const tokenBytes = 24

// Bounds on what a client sends and what the relay rewrites.
const (
	// MaxHeaderBytes bounds a request's header; the relay's server refuses more.
	MaxHeaderBytes = 16 << 10
	// maxBody bounds a request's body: the DevTools HTTP endpoints take none.
	maxBody = 1 << 20
	// maxJSON bounds a /json listing the relay rewrites; one tab takes about 500 bytes.
	maxJSON = 4 << 20
)

// NewToken returns a new token from r (crypto/rand when nil).
func NewToken(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, tokenBytes)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("generating the browser's token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ValidToken reports whether s has the form NewToken gives.
func ValidToken(s string) bool {
	if len(s) != 2*tokenBytes {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Handler relays authorised requests to one backend.
type Handler struct {
	token []byte
	// cdp rewrites the debugger URLs of Chromium's /json listings to the client's view.
	cdp   bool
	proxy *httputil.ReverseProxy
}

// New returns the relay to backend (host:port, on the sandbox's loopback) for token. With
// cdp, backend is Chromium's DevTools port: the Host header it gets is its own address, as
// it refuses any name but an IP address or localhost, and the WebSocket URLs its /json
// listings name are rewritten to the client's host, behind the token.
func New(token, backend string, cdp bool) (*Handler, error) {
	if !ValidToken(token) {
		return nil, errors.New("the browser's token is not 48 hex digits")
	}
	h := &Handler{token: []byte(token), cdp: cdp}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", backend, backend
			// The token is for the relay; the backend has no use for it.
			pr.Out.Header.Del("Authorization")
			if cdp {
				// Go's transport then asks for gzip itself and hands back the plain body,
				// which listings need to be rewritten.
				pr.Out.Header.Del("Accept-Encoding")
			}
		},
		ModifyResponse: h.rewrite,
		// Quiet: a backend still starting is expected, and the container's log is for
		// explaining a failed start.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			http.Error(w, "sbx browser relay: the browser did not answer", http.StatusBadGateway)
		},
	}
	return h, nil
}

// clientHost carries the Host a client asked for to the rewrite of its response.
type clientHost struct{}

// unauthorised is the one answer to a request without the token: it says nothing of what
// is behind it.
func unauthorised(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="sbx browser"`)
	http.Error(w, "sbx browser relay: this endpoint needs the sandbox's token; use the URLs sbx browser printed", http.StatusUnauthorized)
}

// ServeHTTP forwards r with the token's path segment removed, or refuses it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := h.authorise(r)
	if !ok {
		unauthorised(w)
		return
	}
	path, err := url.PathUnescape(rest)
	if err != nil {
		http.Error(w, "sbx browser relay: bad path", http.StatusBadRequest)
		return
	}
	out := r.WithContext(context.WithValue(r.Context(), clientHost{}, r.Host))
	u := *r.URL
	u.Path, u.RawPath = path, rest
	out.URL = &u
	out.Body = http.MaxBytesReader(w, r.Body, maxBody)
	h.proxy.ServeHTTP(w, out)
}

// authorise returns the escaped path to forward when r carries the token: in its first path
// segment (removed), or as a bearer token (the path kept).
func (h *Handler) authorise(r *http.Request) (string, bool) {
	escaped := r.URL.EscapedPath()
	if seg, rest, _ := strings.Cut(strings.TrimPrefix(escaped, "/"), "/"); h.equal(seg) {
		return "/" + rest, true
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && h.equal(strings.TrimSpace(v)) {
		return escaped, true
	}
	return "", false
}

// equal compares s with the token in time that depends only on their lengths.
func (h *Handler) equal(s string) bool {
	return subtle.ConstantTimeCompare([]byte(s), h.token) == 1
}

// listing reports whether path is one of Chromium's /json listings, which name WebSocket URLs.
func listing(path string) bool {
	switch strings.TrimSuffix(path, "/") {
	case "/json", "/json/list", "/json/version", "/json/new":
		return true
	}
	return false
}

// rewrite points the debugger URLs of a /json listing at the client's host and the token.
func (h *Handler) rewrite(resp *http.Response) error {
	req := resp.Request
	if !h.cdp || !listing(req.URL.Path) || resp.StatusCode != http.StatusOK {
		return nil
	}
	// The client names its own view of the relay in Host (net/http checked its form), and
	// only that client is given it back.
	host, _ := req.Context().Value(clientHost{}).(string)
	if host == "" {
		return errors.New("a request without a Host header")
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJSON+1))
	resp.Body.Close()
	if err != nil {
		return err
	}
	if len(body) > maxJSON {
		return fmt.Errorf("a DevTools listing over %d bytes", maxJSON)
	}
	out, err := rewriteListing(body, host, "/"+string(h.token))
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", fmt.Sprint(len(out)))
	resp.Header.Del("Content-Encoding")
	return nil
}

// The fields of a /json listing entry that name the backend's address.
var urlFields = []string{"webSocketDebuggerUrl", "devtoolsFrontendUrl", "devtoolsFrontendUrlCompat"}

// rewriteListing rewrites body, one entry (/json/version, /json/new) or a list of them.
func rewriteListing(body []byte, host, prefix string) ([]byte, error) {
	trimmed := bytes.TrimSpace(body)
	var entries []map[string]json.RawMessage
	single := len(trimmed) > 0 && trimmed[0] == '{'
	if single {
		var e map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &e); err != nil {
			return nil, fmt.Errorf("a DevTools listing: %w", err)
		}
		entries = append(entries, e)
	} else if err := json.Unmarshal(trimmed, &entries); err != nil {
		return nil, fmt.Errorf("a DevTools listing: %w", err)
	}
	for _, e := range entries {
		for _, f := range urlFields {
			raw, ok := e[f]
			if !ok {
				continue
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("a DevTools listing's %s: %w", f, err)
			}
			v, err := rewriteURL(s, host, prefix)
			if err != nil {
				return nil, fmt.Errorf("a DevTools listing's %s: %w", f, err)
			}
			e[f], _ = marshal(v)
		}
	}
	if single {
		return marshal(entries[0])
	}
	return marshal(entries)
}

// rewriteURL points s at host with prefix before its path: a WebSocket URL
// (ws://127.0.0.1:9223/devtools/page/ID), or a front-end page whose ws= (or wss=) parameter
// names one without a scheme and which, when it is relative, Chromium itself serves.
func rewriteURL(s, host, prefix string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	switch {
	case u.Scheme == "ws" || u.Scheme == "wss":
		u.Host, u.Path, u.RawPath = host, prefix+u.Path, ""
		return u.String(), nil
	case u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, "/"):
		u.Path, u.RawPath = prefix+u.Path, ""
	}
	q := u.Query()
	for _, k := range []string{"ws", "wss"} {
		v := q.Get(k)
		if v == "" {
			continue
		}
		_, path, ok := strings.Cut(v, "/")
		if !ok {
			return "", fmt.Errorf("%s=%q names no path", k, v)
		}
		q.Set(k, host+prefix+"/"+path)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// marshal writes v as Chromium writes its listings, keys sorted and indented by three
// spaces, and without HTML escaping, so URLs keep their &.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "   ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Server returns the server for h: bounded headers and a deadline to send them, no deadline
// on a connection once upgraded (a DevTools or VNC session lasts).
func Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// Serve serves h on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := Server(h)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = srv.Close()
		case <-done:
		}
	}()
	defer close(done)
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return ctx.Err()
}
