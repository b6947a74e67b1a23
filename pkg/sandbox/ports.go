package sandbox

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/portforward"
)

// Ports inside a sandbox are reached through its agent (a relay, pkg/agent/PROTOCOL.md), not
// through the engine: nothing is published, the sandbox is not recreated, and a sandbox with
// network none is reached all the same. A sandbox without this sbx's agent is refused: the
// engine's exec has no way to carry a connection that is not a copy of a command's stdio.

// DialPort connects to port on sandbox sb's loopback through its agent. It returns before
// the agent has made the connection (agent.DialPort): nothing listening there is an
// *agent.ConnectError from Connected or the first read.
func (m *Manager) DialPort(ctx context.Context, sb *Sandbox, port int) (*agent.Relay, error) {
	if err := m.agentReady(sb); err != nil {
		return nil, errs.Failure(fmt.Errorf("reaching port %d in sandbox %q: %w", port, sb.Name, err),
			fmt.Sprintf("ports are reached through sbx's agent, which only sandboxes on sbx's bundled images on a local engine run; sbx create -n %s --replace gives it this sbx's agent", sb.Name))
	}
	r, err := agent.DialPort(ctx, m.agentDirOf(sb), port)
	// A burst of connections can fill the agent socket's backlog for a moment, which a Unix
	// socket reports as EAGAIN rather than waiting; the agent empties it as fast as it can.
	for try := 0; errors.Is(err, syscall.EAGAIN) && try < 100; try++ {
		if sleepCtx(ctx, 10*time.Millisecond) != nil {
			break
		}
		r, err = agent.DialPort(ctx, m.agentDirOf(sb), port)
	}
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("sandbox %q: its agent did not answer: %w", sb.Name, err), "is the sandbox running? sbx ls shows it")
	}
	return r, nil
}

// PortDialer is DialPort for sandbox sb, as portforward.Serve and portforward.WaitPort take it.
func (m *Manager) PortDialer(sb *Sandbox) portforward.Dialer {
	return func(ctx context.Context, port int) (portforward.Conn, error) {
		r, err := m.DialPort(ctx, sb, port)
		if err != nil {
			return nil, err // a nil *agent.Relay would be a Conn that is not nil
		}
		return r, nil
	}
}
