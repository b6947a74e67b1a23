// Package ps implements "sbx ps".
package ps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/internal/lazyre"
	"github.com/sbx-sandbox/sbx/pkg/proc"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// PsOptions are the inputs of "sbx ps".
type PsOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	JSON    bool
}

// Entry is one process in "sbx ps --json". Field names are stable.
type Entry struct {
	ID         string     `json:"id"`
	Command    []string   `json:"command"`
	State      string     `json:"state"`    // running, exited or lost
	ExitCode   *int       `json:"exitCode"` // null unless exited
	TimedOut   bool       `json:"timedOut"`
	PID        int        `json:"pid"`
	User       string     `json:"user,omitempty"`
	WorkDir    string     `json:"workdir,omitempty"`
	StartedAt  time.Time  `json:"startedAt"`
	EndedAt    *time.Time `json:"endedAt"`
	DurationMs int64      `json:"durationMs"`
	// DroppedStdout and DroppedStderr count the oldest output bytes no longer kept.
	DroppedStdout int64 `json:"droppedStdoutBytes"`
	DroppedStderr int64 `json:"droppedStderrBytes"`
}

// NewCmdPs builds "sbx ps".
func NewCmdPs(f *cmdutil.Factory, runF func(context.Context, *PsOptions) error) *cobra.Command {
	opts := &PsOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List a sandbox's background processes",
		Long: `List the background processes started with "sbx exec -d" in a sandbox (the project's
default one, or -n NAME): ID, command, state (running, or exited with its code), start time
and how long it ran. Exited processes stay listed until the sandbox stops.`,
		Example: `  sbx ps
  sbx ps -n web --json | jq -r '.[] | select(.state == "running") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, psRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as a JSON array")
	return cmd
}

func psRun(ctx context.Context, opts *PsOptions) error {
	f := opts.Factory
	m, sb, release, err := cmdutil.RunningSandbox(ctx, f, opts.Name)
	if release != nil {
		defer release()
	}
	var notRunning *sandbox.NotRunningError
	var list []proc.Proc
	switch {
	case sandbox.IsNotFound(err) || errors.As(err, &notRunning):
		// Nothing runs in a sandbox that does not: an empty list, and why on stderr.
		opts.IO.Progressf("%v\n", err)
	case err != nil:
		return err
	default:
		if list, err = proc.List(ctx, m, sb); err != nil {
			return err
		}
	}
	entries := Entries(list, f.Now())
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, entries)
	}
	printProcs(opts.IO, entries)
	return nil
}

// printProcs writes the process table.
func printProcs(io *iostreams.IOStreams, entries []Entry) {
	t := cmdutil.Table{Headers: []string{"ID", "COMMAND", "STATE", "STARTED", "DURATION"}}
	for _, e := range entries {
		command := ShellJoin(e.Command)
		if command == "" {
			// Its record in the sandbox was unreadable or too long (proc.MaxMeta).
			command = "?"
		}
		t.Rows = append(t.Rows, []string{e.ID, command, StateText(e), e.StartedAt.Local().Format("2006-01-02 15:04:05"),
			(time.Duration(e.DurationMs) * time.Millisecond).Round(time.Second).String()})
	}
	t.Color = func(row, col int) lipgloss.Color {
		if col != 2 {
			return ""
		}
		switch entries[row].State {
		case "running":
			return "2"
		case "lost":
			return "1"
		}
		return ""
	}
	t.Print(io)
}

// Entries turns processes into their JSON form; durations of running ones run until now.
func Entries(list []proc.Proc, now time.Time) []Entry {
	out := make([]Entry, 0, len(list))
	for _, p := range list {
		e := Entry{ID: p.ID, Command: p.Command, State: p.State, TimedOut: p.TimedOut, PID: p.PID, User: p.User, WorkDir: p.WorkDir,
			StartedAt: p.StartedAt, DurationMs: p.Duration(now).Milliseconds(), DroppedStdout: p.DroppedStdout, DroppedStderr: p.DroppedStderr}
		if e.Command == nil {
			e.Command = []string{}
		}
		if p.State == "exited" {
			code, end := p.ExitCode, p.EndedAt
			e.ExitCode, e.EndedAt = &code, &end
		}
		out = append(out, e)
	}
	return out
}

// StateText is the STATE column: running, exited (CODE), timed out, or lost.
func StateText(e Entry) string {
	switch {
	case e.State == "exited" && e.TimedOut:
		return fmt.Sprintf("timed out (%d)", *e.ExitCode)
	case e.State == "exited":
		return fmt.Sprintf("exited (%d)", *e.ExitCode)
	}
	return e.State
}

var plainWord = lazyre.New(`^[A-Za-z0-9_@%+=:,./-]+$`)

// ShellJoin writes a command the way a POSIX shell would read it back.
func ShellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if plainWord().MatchString(a) {
			quoted[i] = a
		} else {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}
