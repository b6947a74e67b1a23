package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// What runs inside a sandbox on sbx's behalf is bash, kept as files under scripts/ and
// embedded next to the code that runs each one. Every file starts with what runs it, its
// arguments and what it prints or exits with.

// scriptRun is one run of one of sbx's own scripts.
type scriptRun struct {
	script string
	args   []string
	stdin  io.Reader // forwarded when set
	stdout io.Writer // nil: discarded
	// bare starts the script by itself, without Exec's wrapper, for what Exec runs while it
	// ends or checks on a command (execCancel, execOOMCheck): that forks no watchdog in a
	// sandbox whose pids may be used up, and nothing checks on the script's own end in turn.
	// It takes no stdin.
	bare bool
}

// script runs r in sb, its stderr dropped, and returns its exit code. Through Exec (argv[0]
// sbx-script) it runs under the watchdog with a minute to finish, and a cancelled ctx returns
// ctx.Err(); bare, its argv[0] is sbx-helper.
func (m *Manager) script(ctx context.Context, sb *Sandbox, r scriptRun) (int, error) {
	stdout := orDiscard(r.stdout)
	if r.bare {
		cmd := sb.Script(r.script, "sbx-helper", r.args...)
		st, err := m.startCommand(ctx, sb, ExecOptions{}, cmd, func() []string { return cmd }, nil)
		if err != nil {
			return 0, err
		}
		defer st.close()
		// The stream's reads do not see ctx: its end closes the stream.
		defer context.AfterFunc(ctx, st.close)()
		if err := st.copyOutput(stdout, io.Discard); err != nil {
			return 0, err
		}
		return st.wait(ctx)
	}
	res, err := m.Exec(ctx, sb, ExecOptions{
		Cmd:         sb.Script(r.script, "sbx-script", r.args...),
		Interactive: r.stdin != nil, Stdin: r.stdin, Stdout: stdout, Stderr: io.Discard, Timeout: time.Minute,
	})
	if err != nil {
		return 0, err
	}
	if res.Canceled {
		return 0, ctx.Err()
	}
	return res.ExitCode, nil
}

// A listing is a script that lists things in a sandbox, one line of tab-separated fields
// each, with the parser of its output.
type listing[T any] struct {
	script string
	name   string // "process list", for "the process list of sandbox ..."
	things string // "processes", for "listing the processes of sandbox ..."
	limit  int    // the most of its output sbx reads
	parse  func(string) ([]T, error)
}

// list runs l in sb with args and parses what it lists. Exit code 3 says that what args asked
// for is not there: list returns notFound, or when that is nil the error of any other code.
func (l listing[T]) list(ctx context.Context, m *Manager, sb *Sandbox, notFound error, args ...string) ([]T, error) {
	out := &LimitedBuffer{What: fmt.Sprintf("the %s of sandbox %q", l.name, sb.Name), Limit: l.limit}
	code, err := m.script(ctx, sb, scriptRun{script: l.script, args: args, stdout: out})
	switch {
	case err != nil:
		return nil, err
	case code == 3 && notFound != nil:
		return nil, notFound
	case code != 0:
		return nil, errs.Failure(fmt.Errorf("listing the %s of sandbox %q: exit %d", l.things, sb.Name, code), "")
	}
	return l.parse(out.String())
}
