package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
)

// BenchmarkProxyDownload fetches 50 MiB over loopback directly and through the proxy, over
// plain HTTP (the forwarding path) and HTTPS (a CONNECT tunnel), so the ratio the bench
// target asks for (proxy / direct <= 1.2) can be read from one run:
//
//	go test -run '^$' -bench ProxyDownload -benchtime 20x ./pkg/egress
func BenchmarkProxyDownload(b *testing.B) {
	const size = 50 << 20
	payload := make([]byte, size)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(payload)
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(handler)
	defer tlsSrv.Close()
	port := func(s *httptest.Server) int { return s.Listener.Addr().(*net.TCPAddr).Port }

	px := newProxy(b, File{Allow: []string{
		fmt.Sprintf("allowed.test:%d", port(plain)), fmt.Sprintf("allowed.test:%d", port(tlsSrv)), "127.0.0.1",
	}}, nil)
	proxyURL := &url.URL{Scheme: "http", Host: px.addr}

	transport := func(s *httptest.Server, viaProxy bool) *http.Transport {
		tr := &http.Transport{DisableCompression: true}
		if s == tlsSrv {
			tr.TLSClientConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
			tr.TLSClientConfig.ServerName = "example.com"
		}
		if viaProxy {
			tr.Proxy = http.ProxyURL(proxyURL)
		}
		return tr
	}
	for _, bc := range []struct {
		name     string
		srv      *httptest.Server
		viaProxy bool
	}{
		{"http/direct", plain, false},
		{"http/proxy", plain, true},
		{"https/direct", tlsSrv, false},
		{"https/connect", tlsSrv, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tr := transport(bc.srv, bc.viaProxy)
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			host := "127.0.0.1"
			if bc.viaProxy {
				host = "allowed.test"
			}
			target := fmt.Sprintf("%s://%s:%d/", map[bool]string{true: "https", false: "http"}[bc.srv == tlsSrv], host, port(bc.srv))
			b.SetBytes(size)
			b.ResetTimer()
			for b.Loop() {
				resp, err := c.Get(target)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != size {
					b.Fatalf("got %d bytes: %v", n, err)
				}
			}
		})
	}
}
