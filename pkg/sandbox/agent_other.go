//go:build !linux

package sandbox

import (
	"context"
	"net"
	"time"
)

func dialAgentSocket(context.Context, string) (net.Conn, error) { return nil, errNoAgent }

type agentHandoff struct{}

func listenHandoff(string) (*agentHandoff, error)               { return nil, errNoAgent }
func (*agentHandoff) pass(context.Context, time.Duration) error { return errNoAgent }
func (*agentHandoff) close(bool)                                {}
