package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// LogOptions are the inputs of "sbx egress log".
type LogOptions struct {
	IO *iostreams.IOStreams
	// Path is the log of the sandbox, from its name.
	Path   func(name string) string
	Name   string
	Follow bool
	JSON   bool
	Tail   int
	// Ticks paces Follow; nil checks every 250ms.
	Ticks <-chan time.Time
}

// NewCmdLog builds "sbx egress log".
func NewCmdLog(f *cmdutil.Factory, runF func(context.Context, *LogOptions) error) *cobra.Command {
	opts := &LogOptions{IO: f.IOStreams, Path: func(name string) string {
		return (&sandbox.StateStore{Dir: cmdutil.StateDir(f)}).EgressLogPath(name)
	}}
	cmd := &cobra.Command{
		Use:   "log [NAME]",
		Short: "Show what a sandbox's egress proxy allowed and denied",
		Long: `Show the decision log of a sandbox with egress rules: for each request the time, allowed
or denied, the destination as the sandbox named it, the rule (and preset) that decided or
the reason it was refused, and the bytes sent and received. Rule reloads (sbx egress
allow|deny) are lines too. Without a name, the project's default sandbox.

--json prints the log's own lines, one JSON object a line, with the fields of
pkg/egress/README.md. -f keeps printing new lines as the proxy writes them.`,
		Example: `  sbx egress log web
  sbx egress log web -f
  sbx egress log web --json --tail 5 | jq 'select(.allowed == false)'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Tail < 1 {
				return errs.Usagef("--tail must be at least 1")
			}
			names, err := cmdutil.SandboxNames(f, args)
			if err != nil {
				return err
			}
			opts.Name = names[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return logRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new lines")
	fl.BoolVar(&opts.JSON, "json", false, "print the log's JSON lines")
	fl.IntVar(&opts.Tail, "tail", 100, "print at most the last `N` lines first")
	return cmd
}

func logRun(ctx context.Context, opts *LogOptions) error {
	path := opts.Path(opts.Name)
	emit := func(e egress.Entry) error { return writeEntry(opts.IO.Out, e, opts.JSON) }
	if opts.Follow {
		ticks := opts.Ticks
		if ticks == nil {
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			ticks = t.C
		}
		err := egress.Follow(ctx, path, opts.Tail, ticks, emit)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	got, err := egress.ReadLogFile(path, opts.Tail)
	if errors.Is(err, os.ErrNotExist) {
		return errs.New(fmt.Errorf("sandbox %q has no egress log", opts.Name), errs.CodeError,
			"only a sandbox with egress rules (egress: in its config) has one, once its proxy has started")
	}
	if err != nil {
		return fmt.Errorf("reading the egress log: %w", err)
	}
	for _, e := range got.Entries {
		if err := emit(e); err != nil {
			return err
		}
	}
	if got.Dropped > 0 && len(got.Entries) < opts.Tail {
		fmt.Fprintf(opts.IO.ErrOut, "note: %d earlier decisions were dropped: the log keeps its last %d MiB\n", got.Dropped, 2*egress.DefaultLogFileMax>>20)
	}
	if got.Skipped > 0 {
		fmt.Fprintf(opts.IO.ErrOut, "warning: skipped %d lines of %s that are not the proxy's\n", got.Skipped, path)
	}
	return nil
}

// writeEntry prints one log entry: its JSON, or a line for a person. The text is the
// sandbox's to choose (host names it asked for), so it goes through SafeText.
func writeEntry(w io.Writer, e egress.Entry, asJSON bool) error {
	if asJSON {
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	when := e.Time.UTC().Format(time.RFC3339)
	var line string
	switch {
	case e.Event == "reload" && e.Error != "":
		line = fmt.Sprintf("%s  reload   rules refused, the previous ones stay: %s", when, e.Error)
	case e.Event == "rotate":
		line = fmt.Sprintf("%s  rotate   the log was rotated: %d earlier decisions dropped", when, e.Dropped)
	case e.Event != "":
		line = fmt.Sprintf("%s  %-7s  %d rules in effect", when, e.Event, e.Rules)
	default:
		verdict, why := "denied ", e.Reason
		if e.Allowed {
			verdict, why = "allowed", "by "+e.Rule
			if e.Preset != "" {
				why += " (" + e.Preset + ")"
			}
			if e.Reason != "" {
				why += "; " + e.Reason
			}
		} else if e.Rule != "" {
			why += " (" + e.Rule + ")"
		}
		line = fmt.Sprintf("%s  %s  %s  %s  up %d B, down %d B", when, verdict, net.JoinHostPort(e.Host, strconv.Itoa(e.Port)), why, e.BytesUp, e.BytesDown)
	}
	_, err := fmt.Fprintln(w, cmdutil.SafeText(line))
	return err
}
