package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Relay is a connection the agent made to a port on the sandbox's loopback (PROTOCOL.md,
// "Relays"): what is written goes to the port, what is read comes from it, and each way ends
// on its own (CloseWrite), as TCP's half-close does.
type Relay struct {
	c       *Client
	port    int
	pending bool   // the agent's greeting and O (or F) have not been read yet
	rest    []byte // what the last frame held that Read has not returned yet
	eof     bool
}

// ConnectError is a port the agent could not connect to: nothing listens there
// (ECONNREFUSED), or the sandbox is out of descriptors.
type ConnectError struct {
	Port  int
	Errno syscall.Errno
}

func (e *ConnectError) Error() string {
	if e.Errno == syscall.ECONNREFUSED {
		return fmt.Sprintf("nothing listens on port %d inside the sandbox (connection refused)", e.Port)
	}
	return fmt.Sprintf("connecting to port %d inside the sandbox: %v", e.Port, e.Errno)
}

// Refused says nothing listens on the port.
func (e *ConnectError) Refused() bool { return e.Errno == syscall.ECONNREFUSED }

// ErrRelayLost is a relay whose agent connection ended before the port's end of data: the
// port reset the connection, or the sandbox stopped.
var ErrRelayLost = errors.New("the connection inside the sandbox was reset")

// DialPort asks the agent whose socket is in dir to connect to port on the sandbox's
// loopback. It waits neither for the agent's greeting nor for the connection to be made:
// what is written meanwhile waits in the agent (PROTOCOL.md, "Relays"), which saves two
// round trips on every connection. Connected waits for both; otherwise the first read
// returns a refused port as a *ConnectError.
func DialPort(ctx context.Context, dir string, port int) (*Relay, error) {
	conn, err := dial(ctx, dir, nil)
	if err != nil {
		return nil, err
	}
	// A small read buffer: a connection's bytes come in frames that large reads take
	// straight from the socket, and a server may relay hundreds of connections at once.
	c := &Client{conn: conn, rd: bufio.NewReaderSize(conn, 16<<10)}
	if err := c.send(FrameConnect, []byte(strconv.Itoa(port))); err != nil {
		c.Close()
		return nil, err
	}
	return &Relay{c: c, port: port, pending: true}, nil
}

// Connected waits until the agent has made the connection, or says why it could not (a
// *ConnectError).
func (r *Relay) Connected() error {
	if !r.pending {
		return nil
	}
	if err := r.c.Hello(); err != nil {
		return fmt.Errorf("the agent did not greet: %w", err)
	}
	typ, body, err := r.c.next()
	if err != nil {
		return err
	}
	switch typ {
	case FrameConnected:
		r.pending = false
		return nil
	case FrameSpawnFailed:
		num, _, _ := strings.Cut(string(body), "\x00")
		n, err := strconv.Atoi(num)
		if err != nil || n <= 0 {
			return fmt.Errorf("%w: the agent sent the connection failure %q", ErrProtocol, safeText(body))
		}
		return &ConnectError{Port: r.port, Errno: syscall.Errno(n)}
	case FrameRefused:
		return fmt.Errorf("%w: the agent dropped the connection: %s", ErrProtocol, safeText(body))
	}
	return fmt.Errorf("%w: the agent sent a frame of type %q to a connection", ErrProtocol, typ)
}

// frame returns the next piece of the port's data, or io.EOF at its end.
func (r *Relay) frame() ([]byte, error) {
	if r.eof {
		return nil, io.EOF
	}
	if err := r.Connected(); err != nil {
		return nil, err
	}
	typ, body, err := r.c.next()
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return nil, ErrRelayLost
	case err != nil:
		return nil, err
	case typ == FrameStdout:
		return body, nil
	case typ == FrameStdinEOF:
		r.eof = true
		return nil, io.EOF
	case typ == FrameRefused:
		return nil, fmt.Errorf("%w: the agent dropped the connection: %s", ErrProtocol, safeText(body))
	}
	return nil, fmt.Errorf("%w: the agent sent a frame of type %q to a connection", ErrProtocol, typ)
}

// Read reads the port's data.
func (r *Relay) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		body, err := r.frame()
		if err != nil {
			return 0, err
		}
		r.rest = body
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// WriteTo writes the port's data to w until its end, a frame at a time, without a copy.
func (r *Relay) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		body := r.rest
		r.rest = nil
		if len(body) == 0 {
			var err error
			if body, err = r.frame(); err == io.EOF {
				return total, nil
			} else if err != nil {
				return total, err
			}
		}
		n, err := w.Write(body)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}

// Write sends p to the port.
func (r *Relay) Write(p []byte) (int, error) { return r.c.Write(p) }

// chunks are ReadFrom's buffers, reused: a connection that carries one small request would
// otherwise allocate one.
var chunks = sync.Pool{New: func() any { return new([Chunk]byte) }}

// ReadFrom sends what src holds to the port, in frames as large as the agent reads at once.
func (r *Relay) ReadFrom(src io.Reader) (int64, error) {
	b := chunks.Get().(*[Chunk]byte)
	defer chunks.Put(b)
	buf := b[:]
	var total int64
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if err := r.c.send(FrameStdin, buf[:n]); err != nil {
				return total, err
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// CloseWrite ends what is sent to the port; its answer still comes.
func (r *Relay) CloseWrite() error { return r.c.CloseStdin() }

// Close drops the connection both ways.
func (r *Relay) Close() error { return r.c.conn.Close() }

var _ interface {
	io.ReadWriteCloser
	io.WriterTo
	io.ReaderFrom
} = (*Relay)(nil)
