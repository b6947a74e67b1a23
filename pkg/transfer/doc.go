// Package transfer owns copies between the host and a running sandbox (sbx cp, and the
// carried workspace of a remote engine, for the core's sandbox.Carrier): where an item lands,
// its staging and cleanup, and the caps and checks on what comes out (through
// pkg/archive). It needs only the core's Exec.
//
// Copies go through an exec in the running sandbox, never through the engine's archive
// endpoint: that endpoint cannot write into a tmpfs (it reports success and the file never
// appears), refuses read-only roots, and reads the directory under a tmpfs instead of the
// tmpfs. An exec sees the sandbox as its commands do, under the sandbox user's permissions,
// and Exec's watchdog kills it when sbx is interrupted or goes away. The scripts that do the
// sandbox's side are scripts/copy_in.sh and scripts/copy_out.sh.
package transfer
