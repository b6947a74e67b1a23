//go:build !linux

package agent

import (
	"context"
	"errors"
	"net"
	"time"
)

// Only Linux passes the agent its socket and reaches it without following links.
var errUnsupported = errors.New("the agent's sockets need Linux")

func Dial(context.Context, string) (*Client, error) { return nil, errUnsupported }

func dial(context.Context, string, *SocketID) (net.Conn, error) { return nil, errUnsupported }

type Handoff struct{}

func ListenHandoff(string) (*Handoff, error)               { return nil, errUnsupported }
func (*Handoff) Pass(context.Context, time.Duration) error { return errUnsupported }
func (*Handoff) Close(bool)                                {}

func StatSocket(string) (SocketID, error) { return SocketID{}, errUnsupported }
