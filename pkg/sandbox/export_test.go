package sandbox

import "context"

// ClaimPooled lets the external tests claim as Ensure does, past its check that the sandbox
// does not exist, as a second sbx that checked before the first claimed would.
func (m *Manager) ClaimPooled(ctx context.Context, in SpecInput) (*Sandbox, error) {
	return m.claimPooled(ctx, in)
}
