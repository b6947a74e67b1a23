package sandbox

import (
	"bytes"
	"fmt"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Everything a command in a sandbox prints is the sandbox's to choose, even from sbx's own
// scripts: a process there can write into their output through /proc/PID/fd/1. So sbx keeps
// what it parses in a LimitedBuffer, and quotes at most MaxQuoted bytes of stderr in errors.

// MaxCodeSize bounds a script sent to a shell session (pkg/proc) and a snippet (pkg/snippet):
// it is streamed, but a larger one is surely a mistake.
const MaxCodeSize = 16 << 20

// MaxQuoted bounds the stderr an error quotes.
const MaxQuoted = 4 << 10

// OutputLimitError is a command whose output was larger than sbx reads back; the command is
// ended when it is returned.
type OutputLimitError struct {
	What  string // "the process list of sandbox \"web\""
	Limit int
}

func (e *OutputLimitError) Error() string {
	return fmt.Sprintf("%s is larger than the %s sbx reads", e.What, formatBytes(e.Limit))
}

// ExitCode is 125: sbx could not do its part.
func (e *OutputLimitError) ExitCode() int { return errs.CodeFailure }

// Hint says where so much can come from.
func (e *OutputLimitError) Hint() string {
	return "sbx's own scripts never print this much: something in the sandbox changed the files they read or wrote into their output; recreate the sandbox (sbx create --replace) if it keeps happening"
}

// LimitedBuffer keeps what a command prints for sbx to parse, up to Limit bytes; a write
// past that fails with an *OutputLimitError, which ends the command.
type LimitedBuffer struct {
	What  string
	Limit int
	buf   bytes.Buffer
}

func (b *LimitedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.Limit {
		return 0, &OutputLimitError{What: b.What, Limit: b.Limit}
	}
	return b.buf.Write(p)
}

// Bytes returns what was kept.
func (b *LimitedBuffer) Bytes() []byte { return b.buf.Bytes() }

// String returns what was kept.
func (b *LimitedBuffer) String() string { return b.buf.String() }

// formatBytes writes a cap in the largest binary unit that divides it.
func formatBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
