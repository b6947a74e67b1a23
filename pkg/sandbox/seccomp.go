package sandbox

import (
	"crypto/sha256"
	_ "embed" // the built-in profiles
	"encoding/hex"
	"sync"

	"github.com/sbx-sandbox/sbx/pkg/config"
)

// defaultSeccomp is the seccomp profile sandboxes get when none is configured: moby's current
// default, sent with every create instead of leaving the choice to the engine. An older engine's
// built-in default can be far behind (Docker 20.10 still allows io_uring, which Docker 25
// blocked), and a sandbox's filter should not depend on which engine it lands on.
//
// Both built-in profiles are files, as the engine takes them, made from moby's default by
// seccomp_test.go (which checks them, and rewrites them with -update): building and encoding
// a 30 KB profile at every sbx start cost a warm exec 1.2 ms of its 46 (measured).
var defaultSeccomp = sync.OnceValues(func() (string, string) { return withID(defaultSeccompJSON, "builtin:") })

// gvisorSeccomp is defaultSeccomp for a sandbox under gVisor (see buildGVisorSeccomp).
var gvisorSeccomp = sync.OnceValues(func() (string, string) { return withID(gvisorSeccompJSON, "builtin-gvisor:") })

var (
	//go:embed seccomp/default.json
	defaultSeccompJSON string
	//go:embed seccomp/gvisor.json
	gvisorSeccompJSON string
)

// withID is profile data and its ID: prefix and a digest.
func withID(data, prefix string) (string, string) {
	sum := sha256.Sum256([]byte(data))
	return data, prefix + hex.EncodeToString(sum[:8])
}

// seccompFor is the built-in profile for a sandbox with isolation, and its ID, a digest of
// its content, so a new profile in a new sbx shows as a configuration change of existing
// sandboxes.
func seccompFor(isolation string) (profile, id string) {
	if isolation == config.IsolationGVisor {
		return gvisorSeccomp()
	}
	return defaultSeccomp()
}
