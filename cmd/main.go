// Package cmd is sbx's command line: the root command and Main, the one place where errors
// become exit codes and messages.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/agent/agentd"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Main runs sbx with the process's arguments and returns its exit code.
func Main() int {
	// The sbx binary is also the in-sandbox agent (pkg/agent/agentd), mounted into sandboxes:
	// that mode comes first, with nothing of the CLI set up. (The agent's shim runs even
	// earlier, from pkg/agent/shim's init.)
	if len(os.Args) > 1 && os.Args[1] == agent.Mode {
		return agentd.Main(os.Args[2:], os.Environ(), os.Stderr, time.Now)
	}
	f := cmdutil.New()
	if path := f.Getenv("SBX_CPUPROFILE"); path != "" {
		// For make bench: a CPU profile of this one invocation.
		if out, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(out) == nil {
				defer func() { pprof.StopCPUProfile(); out.Close() }()
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	first := ""
	if len(os.Args) > 1 {
		first = os.Args[1]
	}
	root := newCmdRoot(f, first)
	root.SetArgs(os.Args[1:])
	err := root.ExecuteContext(ctx)
	cmdutil.StartRefills(f)
	if err != nil && errs.ExitCode(err) == errs.CodeError {
		err = usageErrorFromCobra(err)
	}
	if err != nil && ctx.Err() != nil && !errs.Silent(err) && errs.ExitCode(err) != errs.CodeTimeout {
		err = errs.New(fmt.Errorf("interrupted"), errs.CodeInterrupted, "")
	}
	return report(f.IOStreams.ErrOut, err)
}

// report prints err with its hint and returns the exit code it maps to. Errors quote what
// sandboxes say (a failed command's stderr, file names), so they are printed through
// SafeLines.
func report(w interface{ Write([]byte) (int, error) }, err error) int {
	if err == nil {
		return errs.CodeOK
	}
	code := exitCode(err)
	if errs.Silent(err) {
		return code
	}
	fmt.Fprintf(w, "error: %s\n", cmdutil.SafeLines(strings.TrimRight(err.Error(), "\n")))
	if hint := errs.Hint(err); hint != "" {
		fmt.Fprintf(w, "hint: %s\n", cmdutil.SafeLines(hint))
	}
	return code
}

func exitCode(err error) int {
	var flagErr *flagError
	switch {
	case errors.As(err, &flagErr):
		return errs.CodeUsage
	case errors.Is(err, context.Canceled):
		return errs.CodeInterrupted
	}
	return errs.ExitCode(err)
}

// flagError marks cobra's own argument and flag parsing failures as usage errors.
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }
func (e *flagError) Hint() string  { return "run with --help to see the usage" }

// usageErrorFromCobra recognises the plain errors cobra returns for unknown commands and bad
// arguments, which it does not type.
func usageErrorFromCobra(err error) error {
	msg := err.Error()
	for _, prefix := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires ", "invalid argument", "flag needs an argument", "bad flag syntax"} {
		if strings.HasPrefix(msg, prefix) {
			return &flagError{err: err}
		}
	}
	return err
}
