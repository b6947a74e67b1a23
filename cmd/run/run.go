// Package run implements "sbx run".
package run

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/snippet"
)

// RunOptions are the inputs of "sbx run".
type RunOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory

	Name       string
	Lang       string
	Code       string
	CodeSet    bool
	File       string
	Stdin      bool // the code comes from stdin ("-")
	Timeout    time.Duration
	TimeoutSet bool
	MaxOutput  int64
	JSON       bool
	Rm         bool
}

// Result is "sbx run --json". Field names are stable.
type Result struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exitCode"`
	TimedOut   bool   `json:"timedOut"`
	Truncated  bool   `json:"truncated"`
	DurationMs int64  `json:"durationMs"`
}

// NewCmdRun builds "sbx run".
func NewCmdRun(f *cmdutil.Factory, runF func(context.Context, *RunOptions) error) *cobra.Command {
	opts := &RunOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "run --lang LANG (-c CODE | -f FILE | -)",
		Short: "Run a code snippet in a sandbox",
		Long: `Run a snippet of code in a sandbox without any quoting: the code is streamed into the
sandbox as a file under /tmp/sbx-run/, run by its language's interpreter or compiler, and
removed afterwards. Quotes, backslashes, "EOF" lines and non-UTF-8 bytes arrive unchanged.

Languages: python, bash and sh in every bundled image; node, go (go run) and java (javac,
then java with the public class, else the first class, as the main class) need the common
profile. The snippet runs in the same directory as "sbx exec" would, with empty stdin.

Each output stream is cut at --max-output bytes (default 1 MiB), with a marker where it was
cut. --json prints {stdout, stderr, exitCode, timedOut, truncated, durationMs} instead of
passing the output through. The exit status is the snippet's own, or 124 on timeout.

With --rm the snippet runs in a fresh sandbox that is removed afterwards, as sbx exec --rm.`,
		Example: `  sbx run --lang python -c 'print(6*7)'
  sbx run -f script.sh
  curl -s https://example.com/x.py | sbx run --lang python -
  SBX_PROFILE=common sbx run --lang node -c 'console.log(process.version)'
  sbx run --lang bash --json -c 'echo out; echo err >&2; exit 3'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if args[0] != "-" {
					return errs.Usagef("unexpected argument %q", args[0]).WithHint("give the code with -c CODE, -f FILE, or - to read it from stdin")
				}
				opts.Stdin = true
			}
			opts.CodeSet = cmd.Flags().Changed("code")
			opts.TimeoutSet = cmd.Flags().Changed("timeout")
			sources := 0
			for _, set := range []bool{opts.CodeSet, opts.File != "", opts.Stdin} {
				if set {
					sources++
				}
			}
			if sources != 1 {
				return errs.Usagef("give the code exactly once: -c CODE, -f FILE, or - for stdin")
			}
			if opts.Lang == "" && opts.File != "" {
				opts.Lang, _ = snippet.ForFile(opts.File)
			}
			if opts.Lang == "" {
				return errs.Usagef("--lang is required").WithHint("use one of " + strings.Join(snippet.Languages(), ", "))
			}
			if _, ok := snippet.Lookup(opts.Lang); !ok {
				return errs.Usagef("unknown language %q", opts.Lang).WithHint("use one of " + strings.Join(snippet.Languages(), ", "))
			}
			if opts.MaxOutput <= 0 {
				return errs.Usagef("--max-output must be at least 1 byte")
			}
			if opts.Timeout < 0 {
				return errs.Usagef("--timeout must not be negative")
			}
			if opts.Rm && opts.Name != "" {
				return errs.Usagef("--rm cannot be combined with -n").WithHint("--rm runs the snippet in a fresh sandbox and removes it afterwards")
			}
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, runRun)
		},
	}
	fl := cmd.Flags()
	cmdutil.NameFlag(fl, &opts.Name)
	fl.StringVarP(&opts.Lang, "lang", "l", "", "`language`: "+strings.Join(snippet.Languages(), ", ")+" (default: from the -f file's extension)")
	fl.StringVarP(&opts.Code, "code", "c", "", "the `code` to run")
	fl.StringVarP(&opts.File, "file", "f", "", "read the code from `file` on the host")
	fl.DurationVar(&opts.Timeout, "timeout", 0, "terminate the snippet after `duration` (default: the timeout key; 0 = none)")
	fl.Int64Var(&opts.MaxOutput, "max-output", snippet.DefaultMaxOutput, "keep at most `N` bytes of each output stream")
	fl.BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	fl.BoolVar(&opts.Rm, "rm", false, "run in a fresh sandbox, removed with its volume, network and state afterwards")
	return cmd
}

func runRun(ctx context.Context, opts *RunOptions) error {
	f := opts.Factory
	code, err := readCode(opts)
	if err != nil {
		return err
	}
	name, ensure, done, err := cmdutil.SandboxFor(f, opts.Name, opts.Rm)
	if err != nil {
		return err
	}
	defer done(ctx)
	r, err := cmdutil.ResolveForSandboxCommand(f, name)
	if err != nil {
		return err
	}
	timeout := cmdutil.Timeout(r, opts.TimeoutSet, opts.Timeout)
	m, sb, release, err := ensure(ctx, f, r)
	if err != nil {
		return err
	}
	defer release()
	ro := snippet.Options{Lang: opts.Lang, Code: code, Env: cmdutil.PassEnv(f, r), WorkDir: cmdutil.WorkDir("", r), Timeout: timeout,
		MaxOutput: opts.MaxOutput, Stdout: opts.IO.Out, Stderr: opts.IO.ErrOut}
	var stdout, stderr bytes.Buffer
	if opts.JSON {
		ro.Stdout, ro.Stderr = &stdout, &stderr
	}
	res, err := snippet.Run(ctx, m, sb, ro)
	_ = m.State.Touch(r.Name)
	if err != nil {
		return err
	}
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, Result{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: res.ExitCode,
			TimedOut: res.TimedOut, Truncated: res.Truncated(), DurationMs: res.Duration.Milliseconds()}); err != nil {
			return err
		}
		if code := errs.ExitCode(cmdutil.ExitFor(&res.ExecResult, timeout, r)); code != 0 {
			return &errs.ExitError{Code: code}
		}
		return nil
	}
	if res.Truncated() {
		fmt.Fprintf(opts.IO.ErrOut, "warning: output truncated at %d bytes per stream (stdout %d bytes, stderr %d bytes in all)\nhint: raise --max-output to see more\n",
			opts.MaxOutput, res.StdoutBytes, res.StderrBytes)
	}
	return cmdutil.ExitFor(&res.ExecResult, timeout, r)
}

func readCode(opts *RunOptions) ([]byte, error) {
	var code []byte
	var err error
	switch {
	case opts.CodeSet:
		return []byte(opts.Code), nil
	case opts.File != "":
		code, err = os.ReadFile(opts.File)
		if err != nil {
			return nil, errs.Usagef("reading the code: %v", err)
		}
	default:
		code, err = io.ReadAll(io.LimitReader(opts.IO.In, snippet.MaxCodeSize+1))
		if err != nil {
			return nil, errs.Usagef("reading the code from stdin: %v", err)
		}
	}
	if len(code) > snippet.MaxCodeSize {
		return nil, errs.Usagef("the code is larger than the %d bytes sbx run accepts", snippet.MaxCodeSize)
	}
	return code, nil
}
