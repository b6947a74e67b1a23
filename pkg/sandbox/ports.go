package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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

// PortPollInterval paces the tries of WaitPort.
const PortPollInterval = 100 * time.Millisecond

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

// PortDialer is DialPort for sandbox sb, as portforward.Serve takes it.
func (m *Manager) PortDialer(sb *Sandbox) portforward.Dialer {
	return func(ctx context.Context, port int) (portforward.Conn, error) {
		r, err := m.DialPort(ctx, sb, port)
		if err != nil {
			return nil, err // a nil *agent.Relay would be a Conn that is not nil
		}
		return r, nil
	}
}

// Listening says whether something in sandbox sb listens on port: whether the agent's
// connection to it is made. It is the one rule for "is the server up?".
func (m *Manager) Listening(ctx context.Context, sb *Sandbox, port int) (bool, error) {
	r, err := m.DialPort(ctx, sb, port)
	if err == nil {
		if err = r.Connected(); err != nil {
			r.Close()
		}
	}
	if ce := (*agent.ConnectError)(nil); errors.As(err, &ce) && ce.Refused() {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.Close()
	return true, nil
}

// maxStatusLine bounds what WaitPort reads of an HTTP answer: the status line is enough.
const maxStatusLine = 4096

// answersHTTP says whether the server on port answers GET path with a status below 400,
// and when not, what it did.
func (m *Manager) answersHTTP(ctx context.Context, sb *Sandbox, port int, path string) (bool, string, error) {
	r, err := m.DialPort(ctx, sb, port)
	if err == nil {
		if err = r.Connected(); err != nil {
			r.Close()
		}
	}
	if ce := (*agent.ConnectError)(nil); errors.As(err, &ce) && ce.Refused() {
		return false, "nothing listened on it", nil
	}
	if err != nil {
		return false, "", err
	}
	defer r.Close()
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	noAnswer := fmt.Sprintf("GET %s got no HTTP answer", path)
	req := fmt.Sprintf("GET %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\nUser-Agent: sbx\r\nAccept: */*\r\n\r\n", path, port)
	if _, err := r.Write([]byte(req)); err != nil {
		return false, noAnswer, nil
	}
	line, err := bufio.NewReader(io.LimitReader(r, maxStatusLine)).ReadString('\n')
	if err != nil {
		return false, noAnswer, nil // not (yet) an HTTP server: a try that failed
	}
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return false, noAnswer, nil
	}
	code, err := strconv.Atoi(f[1])
	if err != nil || code < 100 || code > 999 {
		return false, noAnswer, nil
	}
	return code >= 200 && code < 400, fmt.Sprintf("GET %s answered %d", path, code), nil
}

// WaitPort waits up to timeout until something in sandbox sb listens on port and, with
// httpPath, answers GET httpPath with a 2xx or 3xx status. Running out of time is exit 124,
// with what the last try saw.
func (m *Manager) WaitPort(ctx context.Context, sb *Sandbox, port int, httpPath string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "nothing listened on it"
	answered := false // a try finished with an answer before the deadline
	for {
		var ok bool
		var err error
		if httpPath == "" {
			ok, err = m.Listening(wctx, sb, port)
		} else {
			var why string
			ok, why, err = m.answersHTTP(wctx, sb, port, httpPath)
			// A try the deadline cut short says less than one that finished before it.
			if why != "" && (wctx.Err() == nil || !answered) {
				last = why
				answered = answered || wctx.Err() == nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ok {
			return nil
		}
		// A try the deadline cut short ends the wait as running out of time does, also when
		// it failed (a dial after the deadline: "i/o timeout") before wctx's timer fired.
		if err != nil && wctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if wctx.Err() != nil || sleepCtx(wctx, PortPollInterval) != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errs.New(fmt.Errorf("port %d in sandbox %q was not ready within %s: %s", port, sb.Name, timeout, last), errs.CodeTimeout,
				"is the server started and listening on 127.0.0.1 or 0.0.0.0 inside? sbx ps and sbx logs ID show it; a longer wait gives it more time")
		}
	}
}
