// Package sh implements "sbx sh".
package sh

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// ShOptions are the inputs of "sbx sh".
type ShOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory

	Name       string
	Session    string
	Script     string
	ScriptSet  bool
	Timeout    time.Duration
	TimeoutSet bool
	Wait       time.Duration
	Reset      bool
	List       bool
	JSON       bool
}

// SessionEntry is one session in "sbx sh --list --json". Field names are stable.
type SessionEntry struct {
	Session    string     `json:"session"`
	State      string     `json:"state"` // idle, busy, or exited (the next call starts a new shell)
	Cwd        string     `json:"cwd"`
	PID        int        `json:"pid"`
	StartedAt  time.Time  `json:"startedAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
}

// NewCmdSh builds "sbx sh".
func NewCmdSh(f *cmdutil.Factory, runF func(context.Context, *ShOptions) error) *cobra.Command {
	opts := &ShOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "sh [-n NAME] [-s SESSION] [--timeout D] (-c SCRIPT | --reset | --list)",
		Short: "Run a script in a persistent shell session of a sandbox",
		Long: `Run SCRIPT in a long-lived bash inside the sandbox (created, started or resumed first when
needed), so what one call sets is there in the next: the working directory, exported and
plain variables, functions, aliases, shell options and background jobs. Each session (-s,
default "default") has its own shell; calls on one session run one at a time, and a call
waits up to --wait for the one before it.

Output is exact: stdout and stderr come back apart and byte for byte, as they are written,
and the exit status is the script's (exit in the script ends the shell itself, as it would a
terminal: the next call starts a new one and says so). --timeout (default: the timeout key)
interrupts the script as Ctrl-C would, then kills what it started, and exits 124; the session
keeps its state. A shell that died (exit, out of memory) is replaced by the next call, which
says so on stderr; --reset replaces it on purpose (with -c, before the script runs). --list
shows the sessions with their state, directory and age. Sessions end when the sandbox stops.

Exit status: the script's own; 124 on timeout; 125 when sbx, the engine or the session fails
(or the session stays busy past --wait); 130 when interrupted.`,
		Example: `  sbx sh -c 'cd src && export X=1'
  sbx sh -c 'pwd; echo $X'
  sbx sh -s build --timeout 20m -c 'make -j2'
  sbx sh --reset
  sbx sh --list`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ScriptSet = cmd.Flags().Changed("command")
			opts.TimeoutSet = cmd.Flags().Changed("timeout")
			switch {
			case opts.List && (opts.ScriptSet || opts.Reset || opts.TimeoutSet):
				return errs.Usagef("--list cannot be combined with -c, --reset or --timeout")
			case !opts.List && !opts.ScriptSet && !opts.Reset:
				return errs.Usagef("give a script with -c SCRIPT").WithHint("or --reset to start the session's shell afresh, or --list to see the sessions")
			case opts.JSON && !opts.List:
				return errs.Usagef("--json goes with --list")
			case opts.Timeout < 0:
				return errs.Usagef("--timeout must not be negative")
			case opts.Wait <= 0:
				return errs.Usagef("--wait must be more than 0")
			}
			if err := cmdutil.CheckName(opts.Name); err != nil {
				return err
			}
			if err := proc.ValidSession(opts.Session); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return shRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	cmdutil.NameFlag(fl, &opts.Name)
	fl.StringVarP(&opts.Session, "session", "s", proc.DefaultSession, "`session` name: letters, digits, - and _")
	fl.StringVarP(&opts.Script, "command", "c", "", "the `script` to run in the session's shell")
	fl.DurationVar(&opts.Timeout, "timeout", 0, "interrupt the script after `duration` (default: the timeout key; 0 = none)")
	fl.DurationVar(&opts.Wait, "wait", proc.ShellLockWait, "wait at most `duration` for another call on the session to end")
	fl.BoolVar(&opts.Reset, "reset", false, "start the session's shell afresh")
	fl.BoolVar(&opts.List, "list", false, "list the sandbox's sessions")
	fl.BoolVar(&opts.JSON, "json", false, "with --list: print a JSON array")
	return cmd
}

func shRun(ctx context.Context, opts *ShOptions) error {
	f := opts.Factory
	if opts.List {
		return listRun(ctx, opts)
	}
	r, err := cmdutil.ResolveForSandboxCommand(f, opts.Name)
	if err != nil {
		return err
	}
	timeout := cmdutil.Timeout(r, opts.TimeoutSet, opts.Timeout)
	m, sb, release, err := cmdutil.EnsureSandbox(ctx, f, r)
	if err != nil {
		return err
	}
	defer release()
	res, err := proc.Shell(ctx, m, sb, proc.ShellOptions{
		Session: opts.Session, Script: []byte(opts.Script), NoScript: !opts.ScriptSet, Reset: opts.Reset,
		Timeout: timeout, LockWait: opts.Wait, Env: cmdutil.PassEnv(f, r), WorkDir: cmdutil.WorkDir("", r),
		Stdout: opts.IO.Out, Stderr: opts.IO.ErrOut,
	})
	_ = m.State.Touch(r.Name)
	if err != nil {
		return err
	}
	Announce(opts.IO, opts.Session, res)
	return cmdutil.ShellExitFor(res, timeout, r)
}

// Announce says on stderr when a call started a new shell, or when the shell ended. The
// exit status it may quote is read from a file in the sandbox.
func Announce(io *iostreams.IOStreams, session string, res *proc.ShellResult) {
	if msg := res.Notice(session); msg != "" {
		io.Progressf("sbx: %s\n", cmdutil.SafeText(msg))
	}
}

func listRun(ctx context.Context, opts *ShOptions) error {
	f := opts.Factory
	m, sb, release, err := cmdutil.RunningSandbox(ctx, f, opts.Name)
	var notRunning *sandbox.NotRunningError
	var list []proc.ShellSession
	switch {
	case sandbox.IsNotFound(err) || errors.As(err, &notRunning):
		opts.IO.Progressf("%v\n", err) // sessions end with their sandbox
	case err != nil:
		return err
	default:
		defer release()
		if list, err = proc.Sessions(ctx, m, sb); err != nil {
			return err
		}
	}
	entries := make([]SessionEntry, 0, len(list))
	for _, s := range list {
		e := SessionEntry{Session: s.Name, State: s.State, Cwd: s.Cwd, PID: s.PID, StartedAt: s.StartedAt}
		if !s.LastUsed.IsZero() {
			t := s.LastUsed
			e.LastUsedAt = &t
		}
		entries = append(entries, e)
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, entries)
	}
	printSessions(opts.IO, entries, f.Now())
	return nil
}

// printSessions writes the session table, with ages as of now.
func printSessions(io *iostreams.IOStreams, entries []SessionEntry, now time.Time) {
	t := cmdutil.Table{Headers: []string{"SESSION", "STATE", "CWD", "AGE", "IDLE"}}
	for _, e := range entries {
		age, idle := "-", "-"
		if !e.StartedAt.IsZero() {
			age = sandbox.HumanDuration(now.Sub(e.StartedAt))
		}
		if e.LastUsedAt != nil {
			idle = sandbox.HumanDuration(now.Sub(*e.LastUsedAt))
		}
		cwd := e.Cwd
		if cwd == "" {
			cwd = "-"
		}
		t.Rows = append(t.Rows, []string{e.Session, e.State, cwd, age, idle})
	}
	t.Print(io)
}
