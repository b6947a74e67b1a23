package portforward

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func refusing(context.Context, int) (Conn, error) { return refusedConn{}, nil }

// answering is a server inside that reads a request's first line and answers with status.
func answering(t *testing.T, status string) Dialer {
	return inside(t, func(c net.Conn) {
		_, _ = bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte("HTTP/1.1 " + status + "\r\nContent-Length: 0\r\n\r\n"))
	})
}

func TestListening(t *testing.T) {
	if ok, err := Listening(context.Background(), inside(t, upper), 80); !ok || err != nil {
		t.Errorf("a server inside: %v %v", ok, err)
	}
	if ok, err := Listening(context.Background(), refusing, 80); ok || err != nil {
		t.Errorf("nothing inside: %v %v, want false and no error", ok, err)
	}
}

func TestWaitPort(t *testing.T) {
	ctx := context.Background()
	if err := WaitPort(ctx, answering(t, "204 No Content"), "web", 80, "/health", time.Minute); err != nil {
		t.Errorf("a 204: %v", err)
	}
	if err := WaitPort(ctx, inside(t, upper), "web", 80, "", time.Minute); err != nil {
		t.Errorf("listening, no path: %v", err)
	}
	for _, tt := range []struct {
		name string
		dial Dialer
		path string
		want string
	}{
		{"nothing listens", refusing, "", "nothing listened on it"},
		{"a 503", answering(t, "503 Service Unavailable"), "/", "GET / answered 503"},
		{"not HTTP", inside(t, upper), "/", "GET / got no HTTP answer"},
	} {
		err := WaitPort(ctx, tt.dial, "web", 80, tt.path, 300*time.Millisecond)
		if errs.ExitCode(err) != errs.CodeTimeout || !strings.Contains(err.Error(), `port 80 in sandbox "web" was not ready within 300ms: `+tt.want) {
			t.Errorf("%s: %v (exit %d)", tt.name, err, errs.ExitCode(err))
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := WaitPort(cctx, refusing, "web", 80, "", time.Minute); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
}
