package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// egressCase downloads 50 MiB from a server on this machine, through a sandbox's egress
// proxy (allowed by an IP rule) against over network: bridge, both with curl in a sandbox.
func (b *bench) egressCase() Case {
	proxied, direct := b.name("egress"), b.name("bridge")
	var once sync.Once
	var url string
	var setupErr error
	prepare := func() error {
		once.Do(func() {
			url, setupErr = serveDownload(50 << 20)
			if setupErr != nil {
				return
			}
			hostPort := url[len("http://") : len(url)-len("/data")]
			if out, err := b.sbxOut("create", "-n", proxied, "--egress", hostPort); err != nil {
				setupErr = fmt.Errorf("%v: %s", err, out)
				return
			}
			if out, err := b.sbxOut("create", "-n", direct, "--network", "bridge"); err != nil {
				setupErr = fmt.Errorf("%v: %s", err, out)
			}
		})
		return setupErr
	}
	get := func(name string) (time.Duration, error) {
		if err := prepare(); err != nil {
			return 0, err
		}
		return timed(b.sbxCmd("exec", "-n", name, "--", "curl", "-sSf", "-o", "/dev/null", url))
	}
	return Case{Name: "download 50 MiB through the egress proxy", SbxCmd: "sbx exec (egress: HOST:PORT) -- curl 50 MiB",
		RefCmd: "sbx exec (network: bridge) -- curl 50 MiB", Runs: 5, Ratio: 1.2,
		Sbx:    func(int) (time.Duration, error) { return get(proxied) },
		Docker: func(int) (time.Duration, error) { return get(direct) }}
}

// serveDownload serves size zero bytes at /data on this machine's outward address (the one a
// route to the documentation range 192.0.2.0/24 would leave from; a UDP connect sends nothing)
// and returns the URL.
func serveDownload(size int) (string, error) {
	probe, err := net.Dial("udp", "192.0.2.1:9")
	if err != nil {
		return "", fmt.Errorf("finding this machine's address: %w", err)
	}
	host := probe.LocalAddr().(*net.UDPAddr).IP.String()
	probe.Close()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	data := make([]byte, size)
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = w.Write(data)
		}))
	}()
	return "http://" + l.Addr().String() + "/data", nil
}
