// Package testenv decides what a test does when the machine lacks something it needs (root,
// a tool): on a developer's machine it skips, saying why; where the environment asks for it
// (SBX_REQUIRE_ROOT=1 in "make test", as SBX_REQUIRE_DOCKER=1 does for the engine) it fails,
// so CI cannot pass by skipping what it was meant to run.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// RequireRootEnv names the variable that makes a test needing root fail, not skip, without it.
const RequireRootEnv = "SBX_REQUIRE_ROOT"

// Missing ends t because the machine lacks what the reason names: a failure when the
// variable require is "1", else a skip.
func Missing(t testing.TB, require, format string, a ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, a...)
	if os.Getenv(require) == "1" {
		t.Fatalf("%s=1 but %s", require, reason)
	} else {
		t.Skipf("%s (set %s=1 to fail instead)", reason, require)
	}
}

// RequireRoot ends t, as Missing does, unless it runs as root; why says what needs root.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if uid := os.Geteuid(); uid != 0 {
		Missing(t, RequireRootEnv, "%s needs root, and the test runs as uid %d", why, uid)
	}
}
