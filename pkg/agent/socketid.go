package agent

import (
	"context"
	"errors"
	"time"
)

// SocketID names one agent.sock: sbx binds a new one at every start of a sandbox, and
// device, inode and change time together never name two (an inode number alone may be
// reused once the old socket is gone).
type SocketID struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Ctime int64  `json:"ctime"` // nanoseconds
}

// errOtherSocket is an agent.sock that is not the one asked for.
var errOtherSocket = errors.New("agent.sock is not the socket sbx recorded: the sandbox started again since")

// DialSocket is Dial, to the socket want names only: anything else in its place (the socket
// of a later start, none) is an error, and nothing is connected.
func DialSocket(ctx context.Context, dir string, want SocketID) (*Client, error) {
	conn, err := dial(ctx, dir, &want)
	if err != nil {
		return nil, err
	}
	return newClient(conn), nil
}

// HelloWithin is Hello that waits at most wait for the greeting.
func (c *Client) HelloWithin(wait time.Duration) error { return c.hello(wait) }
