package cmdutil

import (
	"context"
	"fmt"
	"io"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// WarmSandbox is EnsureSandbox for a sandbox that runs as it was started, without a call to
// the engine: sandbox.Manager.Warm, which says when that holds. ok is false, with nothing
// held, when it does not, and the caller calls EnsureSandbox; --debug says why. The manager
// returned reaches the engine only when a command needs it (a sandbox that stopped under
// the command, say). release also closes the agent's connection when no command took it.
func WarmSandbox(ctx context.Context, f *Factory, r *config.Resolved) (m *sandbox.Manager, sb *sandbox.Sandbox, release func(), ok bool) {
	var debug io.Writer
	if f.Global.Debug {
		debug = f.IOStreams.ErrOut
	}
	ep, err := f.Endpoint()
	if err != nil || !sandbox.AgentsSupported(ep.Host) {
		return nil, nil, nil, false // the usual path says what is wrong with the endpoint
	}
	eng, err := engine.Open(ep, debug)
	if err != nil {
		return nil, nil, nil, false
	}
	m = manager(f, eng, ep)
	in, err := m.Resolver.SpecInput(r)
	if err == nil {
		var lease *sandbox.Lease
		if sb, lease, err = m.Warm(ctx, in); err == nil {
			if debug != nil {
				fmt.Fprintf(debug, "sbx: warm exec: sandbox %q's agent answered on the socket of its recorded start; no engine call\n", r.Name)
			}
			_ = m.State.Touch(r.Name)
			return m, sb, func() { sb.Release(); lease.Release() }, true
		}
	}
	if debug != nil {
		fmt.Fprintf(debug, "sbx: warm exec: not for sandbox %q: %v; asking the engine\n", r.Name, err)
	}
	_ = eng.Close()
	return nil, nil, nil, false
}
