// Package onestart calls procs.One from its init. Only the sbx binary imports it: it imports
// nothing else, so it is initialised among the first packages, before the engine client's and
// the CLI's, whose initialisation would otherwise already start threads; a test binary keeps
// its Ps and so its parallel tests.
package onestart

import "github.com/sbx-sandbox/sbx/internal/procs"

func init() { procs.One() }
