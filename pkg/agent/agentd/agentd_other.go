//go:build !linux

package agentd

import (
	"fmt"
	"io"
	"time"
)

// Main refuses: the agent runs only in a Linux sandbox.
func Main(_ []string, _ []string, stderr io.Writer, _ func() time.Time) int {
	fmt.Fprintln(stderr, "sbx-agent: the agent runs only on Linux")
	return 2
}
