// Package workspace owns the review of a sandbox's workspace from the host: sbx diff reads
// an overlay's layers with the sandbox paused (Frozen); sbx apply, discard and rollback change
// them with it stopped, and only when nothing uses it (Change); sbx sync sends host changes
// to a copy carried to a remote engine (Sync). The layers themselves, the diff, apply and
// checkpoint rules are pkg/overlay's; how a workspace reaches a sandbox at create (bound, an
// overlay, a carried copy) is the core's (pkg/sandbox, carry.go and overlay.go). It needs the
// Core interface of sandbox.Manager, and of the engine only pausing.
package workspace
