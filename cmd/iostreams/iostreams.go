// Package iostreams bundles the process's standard streams with what is known about them,
// so commands never reach for os.Stdout and tests can swap in buffers.
package iostreams

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams are the streams a command reads and writes.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdinTTY  bool
	stdoutTTY bool
	stderrTTY bool
	color     bool
	quiet     bool
}

// System returns the process's streams; colour is on for a TTY unless NO_COLOR is set.
func System(getenv func(string) string) *IOStreams {
	s := &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		stdinTTY:  term.IsTerminal(int(os.Stdin.Fd())),
		stdoutTTY: term.IsTerminal(int(os.Stdout.Fd())),
		stderrTTY: term.IsTerminal(int(os.Stderr.Fd())),
	}
	s.color = s.stdoutTTY && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
	return s
}

// Test returns streams backed by buffers: in, out and errOut.
func Test() (*IOStreams, *bytes.Buffer, *bytes.Buffer, *bytes.Buffer) {
	in, out, errOut := &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}

func (s *IOStreams) IsStdinTTY() bool   { return s.stdinTTY }
func (s *IOStreams) IsStdoutTTY() bool  { return s.stdoutTTY }
func (s *IOStreams) IsStderrTTY() bool  { return s.stderrTTY }
func (s *IOStreams) ColorEnabled() bool { return s.color }
func (s *IOStreams) Quiet() bool        { return s.quiet }

// SetTTY marks all three streams as terminals or not (for tests).
func (s *IOStreams) SetTTY(tty bool) { s.stdinTTY, s.stdoutTTY, s.stderrTTY = tty, tty, tty }

// SetColorEnabled turns colour on or off.
func (s *IOStreams) SetColorEnabled(on bool) { s.color = on }

// SetQuiet silences progress messages written with Progressf.
func (s *IOStreams) SetQuiet(q bool) { s.quiet = q }

// Progressf writes a progress or status line on stderr unless quiet.
func (s *IOStreams) Progressf(format string, a ...any) {
	if !s.quiet {
		_, _ = fmt.Fprintf(s.ErrOut, format, a...)
	}
}
