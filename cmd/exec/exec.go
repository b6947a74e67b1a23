// Package exec implements "sbx exec".
package exec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/portforward"
	"github.com/sbx-sandbox/sbx/pkg/proc"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// ExecOptions are the inputs of "sbx exec".
type ExecOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory

	Name        string
	Interactive bool
	TTY         bool
	WorkDir     string
	Env         []string
	EnvFiles    []string
	User        string
	Timeout     time.Duration
	TimeoutSet  bool
	Detach      bool
	Rm          bool
	WaitPort    int           // with Detach: wait until something listens on it inside
	WaitTimeout time.Duration // how long WaitPort waits
	Command     []string
}

// NewCmdExec builds "sbx exec".
func NewCmdExec(f *cmdutil.Factory, runF func(context.Context, *ExecOptions) error) *cobra.Command {
	opts := &ExecOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "exec [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox, creating it when needed",
		Long: `Run a command in a sandbox and return its output and exit status. The sandbox (the
project's default one, or -n NAME) is created and started first when needed.

The command runs in /workspace/<your directory relative to the project root> unless -w says
otherwise. When it ends, times out (--timeout, else the timeout key) or sbx is interrupted,
every process it started in the sandbox is terminated: TERM, then KILL 5 s later.

With --rm the command runs in a fresh sandbox (named tmp-...) that is removed, with its volume,
network and state, before sbx exits, also when it is interrupted. If sbx is killed outright
instead, the next sbx command that reaches the engine removes what it left.

With -d the command runs in the background, detached from sbx: its short process ID is
printed and sbx returns at once. It keeps running after sbx exits, its output is kept inside
the sandbox (the newest 768 KiB to 1 MiB of each stream), and --timeout ends it only when
given (the timeout key does not apply). See it with sbx ps, sbx logs and sbx kill. When its
main process exits, the rest of its process group is terminated as well. --wait-port PORT
then waits (up to --wait-timeout, 1m) until something listens on PORT on the sandbox's
loopback, so a script knows its server is up (exit 124 when it is not in time).

Exit status: the command's own; 124 on timeout; 126/127 when it cannot run / is not found;
125 when sbx or the engine fails; 130 when interrupted.`,
		Example: `  sbx exec -- python3 -c 'print(6*7)'
  cd src && sbx exec -- python3 x.py
  echo data | sbx exec -i -- wc -c
  sbx exec -it -- bash
  sbx exec -n scratch --timeout 30s -e DEBUG=1 -- make test
  sbx exec --rm -- python3 untrusted.py
  sbx exec -d --wait-port 8000 -- python3 -m http.server --bind 127.0.0.1 8000`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() > 0 {
				return errs.Usagef("unexpected arguments before --: %s", strings.Join(args[:cmd.ArgsLenAtDash()], " ")).
					WithHint("put the command after --: sbx exec [flags] -- COMMAND [ARG...]")
			}
			opts.Command = args
			opts.TimeoutSet = cmd.Flags().Changed("timeout")
			if opts.Rm && (opts.Detach || opts.Name != "") {
				return errs.Usagef("--rm cannot be combined with -d or -n").WithHint("--rm runs the command in a fresh sandbox and removes it when the command ends")
			}
			if opts.Detach && (opts.Interactive || opts.TTY) {
				return errs.Usagef("-d cannot be combined with -i or -t").WithHint("a detached command has no stdin; use sbx logs to see its output")
			}
			if (cmd.Flags().Changed("wait-port") || cmd.Flags().Changed("wait-timeout")) && !opts.Detach {
				return errs.Usagef("--wait-port and --wait-timeout need -d").WithHint("a command without -d has ended when sbx returns")
			}
			if cmd.Flags().Changed("wait-port") && (opts.WaitPort < 1 || opts.WaitPort > 65535) {
				return errs.Usagef("bad --wait-port %d: want a port from 1 to 65535", opts.WaitPort)
			}
			if opts.WaitTimeout <= 0 {
				return errs.Usagef("--wait-timeout needs a positive duration")
			}
			if opts.Name != "" {
				if err := config.ValidName(opts.Name); err != nil {
					return errs.Usagef("%v", err)
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return execRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	cmdutil.NameFlag(fl, &opts.Name)
	fl.BoolVarP(&opts.Interactive, "interactive", "i", false, "forward stdin to the command")
	fl.BoolVarP(&opts.TTY, "tty", "t", false, "allocate a terminal")
	fl.StringVarP(&opts.WorkDir, "workdir", "w", "", "working `dir` inside the sandbox")
	cmdutil.ListVarP(fl, &opts.Env, "env", "e", "set `K=V` for this command (K alone takes the host's value)")
	cmdutil.ListVarP(fl, &opts.EnvFiles, "env-file", "", "read variables for this command from `file` (K=V lines)")
	fl.StringVarP(&opts.User, "user", "u", "", "run as `uid[:gid]` instead of the sandbox user")
	fl.DurationVar(&opts.Timeout, "timeout", 0, "terminate the command after `duration` (default: the timeout key; 0 = none)")
	fl.BoolVarP(&opts.Detach, "detach", "d", false, "run the command in the background and print its process ID")
	fl.BoolVar(&opts.Rm, "rm", false, "run in a fresh sandbox, removed with its volume, network and state when the command ends")
	fl.IntVar(&opts.WaitPort, "wait-port", 0, "with -d, wait until something listens on `port` inside the sandbox")
	fl.DurationVar(&opts.WaitTimeout, "wait-timeout", time.Minute, "how long --wait-port waits")
	return cmd
}

func execRun(ctx context.Context, opts *ExecOptions) error {
	f := opts.Factory
	name, ensure, done, err := cmdutil.SandboxFor(f, opts.Name, opts.Rm)
	if err != nil {
		return err
	}
	defer done(ctx)
	r, err := cmdutil.ResolveConfig(f, name)
	if err != nil {
		return err
	}
	if err := config.CheckTool(r, "exec"); err != nil {
		return err
	}
	env, err := execEnv(f, r, opts)
	if err != nil {
		return err
	}
	timeout := cmdutil.Timeout(r, opts.TimeoutSet, opts.Timeout)
	if r.ExecsOnHost() {
		if opts.Detach {
			return cmdutil.HostModeError(r)
		}
		return hostRun(ctx, opts, r, env, timeout)
	}

	// A command in a running sandbox needs no engine call when its agent answers (-u needs
	// the engine's exec; -d and --rm take the usual path).
	m, sb, release, warm := (*sandbox.Manager)(nil), (*sandbox.Sandbox)(nil), func() {}, false
	if !opts.Rm && !opts.Detach && opts.User == "" {
		m, sb, release, warm = cmdutil.WarmSandbox(ctx, f, r)
	}
	if !warm {
		if m, sb, release, err = ensure(ctx, f, r); err != nil {
			return err
		}
	}
	defer release()
	if opts.Detach {
		return detachRun(ctx, opts, m, sb, env, r)
	}

	eo := sandbox.ExecOptions{
		Cmd: opts.Command, Env: env, WorkDir: cmdutil.WorkDir(opts.WorkDir, r), User: opts.User,
		TTY: opts.TTY, Interactive: opts.Interactive, Timeout: timeout,
		Stdin: opts.IO.In, Stdout: opts.IO.Out, Stderr: opts.IO.ErrOut,
	}
	if opts.TTY {
		restore, err := setupTTY(opts.IO, &eo)
		if err != nil {
			return err
		}
		defer restore()
	}
	result, err := m.Exec(ctx, sb, eo)
	_ = m.State.Touch(r.Name)
	if err != nil {
		return err
	}
	return cmdutil.ExitFor(result, timeout, r)
}

// detachRun starts the command as a background process and prints its ID.
func detachRun(ctx context.Context, opts *ExecOptions, m *sandbox.Manager, sb *sandbox.Sandbox, env []string, r *config.Resolved) error {
	var timeout time.Duration
	if opts.TimeoutSet {
		timeout = opts.Timeout
	}
	id, err := proc.Start(ctx, m, sb, proc.Options{Cmd: opts.Command, Env: env, WorkDir: cmdutil.WorkDir(opts.WorkDir, r), User: opts.User, Timeout: timeout})
	if err != nil {
		return err
	}
	fmt.Fprintln(opts.IO.Out, id)
	name := ""
	if !r.IsDefaultName {
		name = " -n " + r.Name
	}
	opts.IO.Progressf("started process %s in sandbox %q; its output: sbx logs%s %s\n", id, r.Name, name, id)
	if opts.WaitPort == 0 {
		return nil
	}
	opts.IO.Progressf("waiting for port %d in sandbox %q\n", opts.WaitPort, r.Name)
	return portforward.WaitPort(ctx, m.PortDialer(sb), sb.Name, opts.WaitPort, "", opts.WaitTimeout)
}

// execEnv gathers the per-exec variables: passEnv names from the host, then --env-file, then -e.
func execEnv(f *cmdutil.Factory, r *config.Resolved, opts *ExecOptions) ([]string, error) {
	env := cmdutil.PassEnv(f, r)
	for _, file := range opts.EnvFiles {
		vars, err := readEnvFile(file)
		if err != nil {
			return nil, err
		}
		env = append(env, vars...)
	}
	for _, kv := range opts.Env {
		name, _, hasValue := strings.Cut(kv, "=")
		if name == "" || strings.ContainsRune(kv, 0) {
			return nil, errs.Usagef("bad -e %q: want K=V or K", kv)
		}
		if !hasValue {
			v, ok := f.LookupEnv(name)
			if !ok {
				continue
			}
			kv = name + "=" + v
		}
		env = append(env, kv)
	}
	return env, nil
}

func readEnvFile(file string) ([]string, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, errs.Usagef("reading --env-file: %v", err)
	}
	defer fh.Close()
	var vars []string
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if name, _, ok := strings.Cut(line, "="); !ok || name == "" {
			return nil, errs.Usagef("%s:%d: want K=V, got %q", file, n, line)
		}
		vars = append(vars, line)
	}
	if err := sc.Err(); err != nil {
		return nil, errs.Usagef("reading --env-file %s: %v", file, err)
	}
	return vars, nil
}

// setupTTY puts the local terminal in raw mode and forwards window-size changes.
func setupTTY(io *iostreams.IOStreams, eo *sandbox.ExecOptions) (func(), error) {
	in, ok := io.In.(*os.File)
	out, okOut := io.Out.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		fmt.Fprintln(io.ErrOut, "warning: -t without a terminal on stdin; output is not a terminal session")
		return func() {}, nil
	}
	sizeFd := int(in.Fd())
	if okOut && term.IsTerminal(int(out.Fd())) {
		sizeFd = int(out.Fd())
	}
	eo.TTYSize = func() (uint, uint, bool) {
		w, h, err := term.GetSize(sizeFd)
		return uint(h), uint(w), err == nil
	}
	state, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("putting the terminal in raw mode: %w", err), "")
	}
	resize := make(chan struct{}, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		for range winch {
			select {
			case resize <- struct{}{}:
			default:
			}
		}
	}()
	eo.Resize = resize
	return func() {
		signal.Stop(winch)
		close(winch)
		_ = term.Restore(int(in.Fd()), state)
	}, nil
}

// hostRun runs the command directly on the host, as mode off (or non-main for the default
// sandbox) asks, after saying so on stderr.
func hostRun(ctx context.Context, opts *ExecOptions, r *config.Resolved, env []string, timeout time.Duration) error {
	fmt.Fprintf(opts.IO.ErrOut, "warning: running on the host, not in a sandbox (mode %s, from %s)\n", r.Config.Mode, r.Source("mode"))
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c := osexec.CommandContext(ctx, opts.Command[0], opts.Command[1:]...)
	c.Stdin, c.Stdout, c.Stderr = nil, opts.IO.Out, opts.IO.ErrOut
	if opts.Interactive {
		c.Stdin = opts.IO.In
	}
	c.Env = append(opts.Factory.Environ(), env...)
	if opts.WorkDir != "" {
		c.Dir = opts.WorkDir
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGTERM) }
	c.WaitDelay = sandbox.KillGrace
	err := c.Run()
	var exitErr *osexec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return errs.New(fmt.Errorf("timed out after %s", timeout), errs.CodeTimeout, "")
	case errors.As(err, &exitErr):
		if code := exitErr.ExitCode(); code >= 0 {
			return &errs.ExitError{Code: code}
		}
		return errs.New(err, errs.CodeInterrupted, "")
	case errors.Is(err, osexec.ErrNotFound):
		return errs.New(err, errs.CodeNotFound, "")
	}
	return errs.New(err, errs.CodeCannotExec, "")
}
