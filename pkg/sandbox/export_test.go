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

// RecordStart records sb's start as finishAgent does once its agent took the socket.
func (m *Manager) RecordStart(sb *Sandbox) { m.recordStart(sb) }

// WriteClaim records that sandbox name is rec's pooled container, as a claim does.
func (s *StateStore) WriteClaim(name, id, pooled string) error {
	return s.writeClaim(name, claimRecord{ID: id, Pooled: pooled})
}

// SetWarmHello sets how long Warm waits for a greeting, until the test ends.
func SetWarmHello(t interface{ Cleanup(func()) }, d time.Duration) {
	old := warmHello
	warmHello = d
	t.Cleanup(func() { warmHello = old })
}

// SetAgentWait shortens how long a start waits for its agent, until the test ends.
func SetAgentWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := agentWait
	agentWait = d
	t.Cleanup(func() { agentWait = old })
}

// HelperLayerID is the DiffID the engine reports for sbx's helper image once imported.
func HelperLayerID() string { return helperLayerID(helperLayer()) }

// SetProcessUser makes uid:gid the user sbx runs as, until the test ends.
func SetProcessUser(t interface{ Cleanup(func()) }, uid, gid int) {
	old := processUser
	processUser = func() (int, int) { return uid, gid }
	t.Cleanup(func() { processUser = old })
}
