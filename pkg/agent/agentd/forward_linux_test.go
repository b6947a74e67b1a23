package agentd

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// A forward relays a connection both ways, each side's end of data included: the socket
// reads the whole request before it answers, and the client reads the whole answer.
func TestForwardRelaysBothWays(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "proxy.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "got %d bytes", n)
			}()
		}
	}()
	var logged strings.Builder
	addr, err := forward("127.0.0.1:0="+socket, func(f string, a ...any) { fmt.Fprintf(&logged, f+"\n", a...) })
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(make([]byte, 4<<20)); err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		answer, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(answer) != "got 4194304 bytes" {
			t.Errorf("answer %q, %v (log %q)", answer, err, logged.String())
		}
	}
}

// With nothing at the socket, a connection ends at once, and the agent says why.
func TestForwardWithoutItsSocket(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "missing.sock")
	logs := make(chan string, 1)
	addr, err := forward("127.0.0.1:0="+socket, func(f string, a ...any) { logs <- fmt.Sprintf(f, a...) })
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
		t.Errorf("read %q, %v; want the end of the connection", b, err)
	}
	if msg := <-logs; !strings.Contains(msg, "missing.sock") {
		t.Errorf("log %q", msg)
	}
	if _, err := forward("127.0.0.1:0", nil); err == nil {
		t.Error("a forward without its socket's path was taken")
	}
}
