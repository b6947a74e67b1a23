// Package portforward is what "sbx port-forward" and the MCP tool forward_port share: the
// [[ADDR:]LOCAL:]REMOTE mappings, listening on this machine (loopback unless an address is
// given), and relaying every connection to a port inside a sandbox through a dialer (the
// sandbox's agent, pkg/sandbox), each way ending on its own. It also owns the one rule for
// "is the server up?" (Listening) and the waits on it (WaitPort: exec --wait-port,
// port-forward --wait-http, the MCP tools).
package portforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// DefaultAddr is where a forward listens unless its mapping names an address.
const DefaultAddr = "127.0.0.1"

// MaxConns bounds the connections one forward relays at once; the next ones wait in the
// listener's backlog until one ends.
const MaxConns = 512

// Spec is one mapping: LOCAL on Addr on this machine to Remote inside the sandbox. Local 0
// picks a free port.
type Spec struct {
	Addr   string
	Local  int
	Remote int
}

// ParseSpec reads [[ADDR:]LOCAL:]REMOTE, as kubectl port-forward does: REMOTE alone listens on
// the same port number; ADDR may be an IPv6 address in brackets.
func ParseSpec(s string) (Spec, error) {
	sp := Spec{Addr: DefaultAddr}
	rest := s
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		head := rest[:i]
		rest = rest[i+1:]
		if j := strings.LastIndexByte(head, ':'); j >= 0 && !strings.HasSuffix(head, "]") {
			sp.Addr, head = strings.TrimSuffix(strings.TrimPrefix(head[:j], "["), "]"), head[j+1:]
			if sp.Addr == "" {
				return sp, fmt.Errorf("bad mapping %q: an empty address", s)
			}
		}
		var err error
		if sp.Local, err = port(head, true); err != nil {
			return sp, fmt.Errorf("bad mapping %q: local port %w", s, err)
		}
	}
	var err error
	if sp.Remote, err = port(rest, false); err != nil {
		return sp, fmt.Errorf("bad mapping %q: remote port %w", s, err)
	}
	if !strings.Contains(s, ":") {
		sp.Local = sp.Remote
	}
	if strings.Contains(sp.Addr, ":") && net.ParseIP(sp.Addr) == nil {
		return sp, fmt.Errorf("bad mapping %q: %q is no address", s, sp.Addr)
	}
	return sp, nil
}

func port(s string, zero bool) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 || n == 0 && !zero || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("%q is not a port (1-65535%s)", s, map[bool]string{true: ", or 0 for a free one"}[zero])
	}
	return n, nil
}

// Loopback says whether the mapping listens only on this machine's loopback. A name
// (localhost) counts only when every address it has is loopback, which Listen checks.
func (s Spec) Loopback() bool {
	ip := net.ParseIP(s.Addr)
	return ip != nil && ip.IsLoopback() || s.Addr == "localhost"
}

// Forward is a mapping with its listener.
type Forward struct {
	Spec
	ln net.Listener
}

// Port is the local port it listens on, the one picked for Local 0.
func (f *Forward) Port() int { return f.ln.Addr().(*net.TCPAddr).Port }

// Host is the address it listens on.
func (f *Forward) Host() string { return f.ln.Addr().(*net.TCPAddr).IP.String() }

// URL is http:// and its address, for a web server behind it.
func (f *Forward) URL() string {
	return "http://" + net.JoinHostPort(f.Host(), strconv.Itoa(f.Port()))
}

// Close stops listening.
func (f *Forward) Close() error { return f.ln.Close() }

// Listen listens for every mapping, or for none: a port in use is an error that says so.
func Listen(ctx context.Context, specs []Spec) ([]*Forward, error) {
	var fws []*Forward
	for _, sp := range specs {
		addr := net.JoinHostPort(sp.Addr, strconv.Itoa(sp.Local))
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err == nil && sp.Addr == "localhost" && !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
			ln.Close()
			err = fmt.Errorf("localhost is not a loopback address here")
		}
		if err != nil {
			for _, fw := range fws {
				fw.Close()
			}
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, errs.New(fmt.Errorf("cannot listen on %s: the port is in use", addr), errs.CodeError,
					"another process (another sbx port-forward?) listens there; pick another LOCAL port, or 0 for a free one")
			}
			return nil, errs.New(fmt.Errorf("cannot listen on %s: %w", addr, err), errs.CodeError, "")
		}
		fws = append(fws, &Forward{Spec: sp, ln: ln})
	}
	return fws, nil
}

// Conn is a connection to the port inside: a *agent.Relay, which may not be made yet (its
// reads then return a ConnectFailure).
type Conn interface {
	io.ReadWriteCloser
	CloseWrite() error
	// Connected waits until the connection inside is made, or returns why it was not (a
	// ConnectFailure when nothing listened).
	Connected() error
}

// Dialer connects to a port inside the sandbox.
type Dialer func(ctx context.Context, port int) (Conn, error)

// Serve relays every connection to fw to its remote port until ctx ends, then stops
// listening and drops the connections it relays. A connection that cannot be made inside
// (nothing listens there) is closed at once and passed to report; the forward serves on.
func Serve(ctx context.Context, fw *Forward, dial Dialer, report func(error)) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		open  = map[io.Closer]struct{}{}
		slots = make(chan struct{}, MaxConns)
	)
	track := func(c io.Closer, on bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if on && ctx.Err() != nil {
			return false
		}
		if on {
			open[c] = struct{}{}
		} else {
			delete(open, c)
		}
		return true
	}
	stop := context.AfterFunc(ctx, func() {
		fw.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range open {
			c.Close()
		}
	})
	defer stop()
	defer wg.Wait()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		c, err := fw.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				<-slots
				report(fmt.Errorf("accepting on %s: %w", fw.ln.Addr(), err))
				continue
			}
			return fmt.Errorf("accepting on %s: %w", fw.ln.Addr(), err)
		}
		if !track(c, true) {
			c.Close()
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer track(c, false)
			defer c.Close()
			in, err := dial(ctx, fw.Remote)
			if err == nil {
				if !track(in, true) {
					in.Close()
					return
				}
				defer track(in, false)
				defer in.Close()
				err = Relay(c.(*net.TCPConn), in)
			}
			var cf ConnectFailure
			if err != nil && ctx.Err() == nil && (in == nil || errors.As(err, &cf)) {
				report(fmt.Errorf("connection from %s to port %d: %w", c.RemoteAddr(), fw.Remote, err))
			}
		}()
	}
}

// ConnectFailure is an error of a connection that could not be made inside the sandbox
// (*agent.ConnectError): Serve reports it.
type ConnectFailure interface {
	error
	Refused() bool
}

// Relay moves bytes between a connection on this machine and one inside until both ways
// have ended; each way's end is passed on as a half-close. The connection on this machine
// failing drops both; so does the one inside, whose error Relay returns.
func Relay(local *net.TCPConn, in Conn) error {
	abort := func() { _ = local.SetLinger(0); local.Close(); in.Close() }
	done := make(chan struct{})
	go func() {
		defer close(done)
		src := &readErr{r: local}
		if _, err := io.Copy(in, src); err == nil {
			_ = in.CloseWrite()
		} else if src.err != nil {
			abort()
		}
		// Else writing inside failed: the agent ended the connection, and the other way
		// reads why.
	}()
	_, err := io.Copy(local, in)
	if err != nil {
		abort()
	} else {
		_ = local.CloseWrite()
	}
	<-done
	return err
}

// readErr remembers an error reading r, to tell it from one writing elsewhere. It has no
// WriteTo, so io.Copy hands it to the relay's ReadFrom, which sends large frames.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}
