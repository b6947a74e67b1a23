//go:build !linux

package sandbox

import (
	"context"
	"net"
)

func dialAgentSocket(context.Context, string) (net.Conn, error) { return nil, errNoAgent }
