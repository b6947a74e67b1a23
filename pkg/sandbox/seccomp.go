package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/moby/profiles/seccomp"
)

// defaultSeccomp is the seccomp profile sandboxes get when none is configured: moby's current
// default, sent with every create instead of leaving the choice to the engine. An older engine's
// built-in default can be far behind (Docker 20.10 still allows io_uring, which Docker 25
// blocked), and a sandbox's filter should not depend on which engine it lands on.
var defaultSeccomp = sync.OnceValues(func() (string, string) {
	data, err := json.Marshal(seccomp.DefaultProfile())
	if err != nil {
		panic("encoding the built-in seccomp profile: " + err.Error())
	}
	sum := sha256.Sum256(data)
	return string(data), "builtin:" + hex.EncodeToString(sum[:8])
})

// DefaultSeccompID names the built-in profile by a digest of its content, so a new profile in
// a new sbx shows as a configuration change of existing sandboxes.
func DefaultSeccompID() string {
	_, id := defaultSeccomp()
	return id
}
