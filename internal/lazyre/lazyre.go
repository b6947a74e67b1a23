// Package lazyre compiles a regular expression on its first use rather than when sbx starts:
// every sbx process (a warm exec, the agent's shim excepted) would otherwise compile every
// package's expressions before doing anything, whether it uses them or not.
package lazyre

import (
	"regexp"
	"sync"
)

// New returns expr's compiled form, compiled on the first call; an expression that does not
// compile panics then, as regexp.MustCompile does.
func New(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
