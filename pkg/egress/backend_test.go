package egress

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// rawBackend is a loopback HTTP server that records each request's bytes exactly and
// answers each with reply.
// tcpBackend listens on loopback and serves each connection with serve, closing it after;
// it returns the port.
func tcpBackend(t testing.TB, serve func(net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for c, err := l.Accept(); err == nil; c, err = l.Accept() {
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

type rawBackend struct {
	port  int
	mu    sync.Mutex
	heads []string
	hold  chan struct{} // when set, each connection stays open after the reply until it closes
}

func newRawBackend(t *testing.T, reply string) *rawBackend {
	t.Helper()
	b := &rawBackend{}
	b.port = tcpBackend(t, func(c net.Conn) {
		req, err := io.ReadAll(io.LimitReader(readUntilHeadEnd(c), 1<<20))
		if err != nil {
			return
		}
		b.mu.Lock()
		b.heads = append(b.heads, string(req))
		hold := b.hold
		b.mu.Unlock()
		io.WriteString(c, reply)
		if hold != nil {
			<-hold
		}
	})
	return b
}

// readUntilHeadEnd returns a reader that ends after the request's head and, for a
// Content-Length body, the body.
func readUntilHeadEnd(c net.Conn) io.Reader {
	br := bufio.NewReader(c)
	var head bytes.Buffer
	length := 0
	for {
		line, err := br.ReadString('\n')
		head.WriteString(line)
		if err != nil || line == "\r\n" {
			break
		}
		if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length: "); ok {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return io.MultiReader(&head, io.LimitReader(br, int64(length)))
}

func (b *rawBackend) received() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.heads...)
}

const reply = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\nX-Backend: raw\r\n\r\nhello"
