package sandbox

import (
	"context"
	"time"
)

// ClaimPooled lets the external tests claim as Ensure does, past its check that the sandbox
// does not exist, as a second sbx that checked before the first claimed would.
func (m *Manager) ClaimPooled(ctx context.Context, in SpecInput) (*Sandbox, error) {
	return m.claimPooled(ctx, in)
}

// SetAgentWait shortens how long a start waits for its agent, until the test ends.
func SetAgentWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := agentWait
	agentWait = d
	t.Cleanup(func() { agentWait = old })
}
