package mcpserver

import (
	"context"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport serves the protocol on in and out as newline-delimited JSON, answering
// every request read before in ends. A client may write all its requests and close its end
// at once (printf ... | sbx mcp); the SDK takes the end of input as the end of the session
// and drops the answers still being made (go-sdk issue 1061), so here the end is held back
// from the SDK until every request read has been answered.
func StdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	return &drainTransport{&mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type drainTransport struct{ mcp.Transport }

func (t *drainTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &drainConn{Connection: c, answered: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

// drainConn counts the requests it reads and the responses written. Every request with an
// ID gets exactly one response, even a duplicate ID or a cancelled call, so counting is
// enough; when the server can no longer write, it closes the connection, which ends the wait.
type drainConn struct {
	mcp.Connection
	mu        sync.Mutex
	pending   int
	answered  chan struct{} // a token when pending drops to 0
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *drainConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		c.drain(ctx)
		return nil, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		c.mu.Lock()
		c.pending++
		c.mu.Unlock()
	}
	return msg, nil
}

// drain waits until every request read has been answered, the connection is closed, or ctx
// ends.
func (c *drainConn) drain(ctx context.Context) {
	for {
		c.mu.Lock()
		n := c.pending
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.answered:
		case <-c.closed:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (c *drainConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if _, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		c.pending--
		if c.pending == 0 {
			select {
			case c.answered <- struct{}{}:
			default:
			}
		}
		c.mu.Unlock()
	}
	return err
}

func (c *drainConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}
