package sandbox

import (
	"context"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
)

// Under gVisor, accept on the listener sbx makes on the host and hands over fails (EINVAL):
// gVisor cannot serve a host socket it was given. runsc's --host-uds=create (one of
// GVisorRuntimeArgs) lets a process in the sandbox bind a Unix socket in a host directory
// mounted read-write, which host processes can then connect to (measured on Debian's runsc
// 2022-12-19). So a gVisor sandbox's agent binds agent.sock itself (agent.OwnSocket) in its
// directory, mounted read-write for it; sbx empties the directory before every start and
// then waits for the socket to answer. The sandbox can write there, as into a rw workspace:
// sbx only ever dials agent.sock there, opened without following links and checked to be a
// socket (agent.Dial), and links no idle lock in (gVisor keeps file locks to itself, so
// idleStop is refused under gVisor: config's validation).

// agentOwnsSocket says whether the agent of a sandbox with isolation binds its socket itself.
func agentOwnsSocket(isolation string) bool { return isolation == config.IsolationGVisor }

// isolation is the sandbox's isolation, from its config label: "" for the default, which
// the label leaves out.
func (s *Sandbox) isolation() string {
	var shape struct {
		Isolation string `json:"isolation"`
	}
	s.fromShape(&shape)
	return shape.Isolation
}

// underGVisor says whether the sandbox runs under gVisor.
func (s *Sandbox) underGVisor() bool { return s.isolation() == config.IsolationGVisor }

// startOwnSocket starts the sandbox of as, whose agent binds its own socket; finishAgent then
// waits for it.
func (m *Manager) startOwnSocket(ctx context.Context, as *agentStart) (*agentStart, error) {
	if err := m.engineStart(ctx, as.sb); err != nil {
		as.abandon()
		return nil, err
	}
	as.await = true
	return as, nil
}

// awaitAgent waits, up to agentWait, for the agent of sandbox sb to answer on the socket it
// binds itself, and reports whether it did. One that does not leaves commands to the
// engine's exec until it does.
func (m *Manager) awaitAgent(ctx context.Context, sb *Sandbox) bool {
	if err := agent.Await(ctx, m.agentDirOf(sb), agentWait); err != nil {
		m.debugf("sandbox %q: its agent did not answer on its socket: %v; commands will go through the engine's exec", sb.Name, err)
		return false
	}
	return true
}
