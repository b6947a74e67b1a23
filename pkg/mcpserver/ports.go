package mcpserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/portforward"
)

// MaxForwards bounds the forwards one server keeps open.
const MaxForwards = 16

// ForwardInput is the forward_port tool's arguments.
type ForwardInput struct {
	Port        int     `json:"port" jsonschema:"the port inside the sandbox (on its loopback) to reach"`
	LocalPort   int     `json:"localPort,omitempty" jsonschema:"the port on the user's machine (127.0.0.1); default: a free one"`
	WaitSeconds float64 `json:"waitSeconds,omitempty" jsonschema:"first wait up to this many seconds until something listens on port inside (default: no wait)"`
}

// ForwardOutput is a forward forward_port started.
type ForwardOutput struct {
	URL        string `json:"url"`
	Address    string `json:"address"`
	LocalPort  int    `json:"localPort"`
	RemotePort int    `json:"remotePort"`
}

// forwards are the forwards the server started; they end with Options.Lifetime.
type forwards struct {
	mu sync.Mutex
	n  int
}

func (s *server) forwardPort(ctx context.Context, in ForwardInput) (ForwardOutput, error) {
	if in.Port < 1 || in.Port > 65535 || in.LocalPort < 0 || in.LocalPort > 65535 {
		return ForwardOutput{}, errs.Usagef("port must be 1-65535 and localPort 0-65535")
	}
	if in.WaitSeconds < 0 || in.WaitSeconds > 600 {
		return ForwardOutput{}, errs.Usagef("waitSeconds must be 0-600")
	}
	s.fw.mu.Lock()
	if s.fw.n >= MaxForwards {
		s.fw.mu.Unlock()
		return ForwardOutput{}, errs.Failure(fmt.Errorf("this server already forwards %d ports", MaxForwards), "reuse the URLs it returned")
	}
	s.fw.n++
	s.fw.mu.Unlock()
	started := false
	defer func() {
		if !started {
			s.fw.mu.Lock()
			s.fw.n--
			s.fw.mu.Unlock()
		}
	}()
	// The sandbox stays leased while the forward lives, so maxRunning never pauses it.
	m, sb, release, err := s.Sandbox(s.Lifetime)
	if err != nil {
		return ForwardOutput{}, err
	}
	if in.WaitSeconds > 0 {
		if err := portforward.WaitPort(ctx, m.PortDialer(sb), sb.Name, in.Port, "", time.Duration(in.WaitSeconds*float64(time.Second))); err != nil {
			release()
			return ForwardOutput{}, err
		}
	}
	fws, err := portforward.Listen(ctx, []portforward.Spec{{Addr: portforward.DefaultAddr, Local: in.LocalPort, Remote: in.Port}})
	if err != nil {
		release()
		return ForwardOutput{}, err
	}
	fw := fws[0]
	dial := m.PortDialer(sb)
	started = true
	go func() {
		defer release()
		// A connection that finds nothing inside is closed; the server has no terminal to say
		// so on, and the agent sees it as a failed request.
		_ = portforward.Serve(s.Lifetime, fw, dial, func(error) {})
	}()
	return ForwardOutput{URL: fw.URL(), Address: fw.Host(), LocalPort: fw.Port(), RemotePort: in.Port}, nil
}
