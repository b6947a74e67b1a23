package sandbox

import (
	"context"
	"io"
)

// What runs inside a sandbox on sbx's behalf is bash, kept as files under scripts/ and
// embedded next to the code that runs each one. Every file starts with what runs it, its
// arguments and what it prints or exits with.

// scriptRun is one run of one of sbx's own scripts, by itself, without Exec's wrapper: for
// what Exec runs while it ends or checks on a command (execCancel, execOOMCheck), which forks
// no watchdog in a sandbox whose pids may be used up, and nothing checks on the script's own
// end in turn. It takes no stdin.
type scriptRun struct {
	script string
	args   []string
	stdout io.Writer // nil: discarded
}

// script runs r in sb as sbx-helper, its stderr dropped, and returns its exit code.
func (m *Manager) script(ctx context.Context, sb *Sandbox, r scriptRun) (int, error) {
	cmd := sb.Script(r.script, "sbx-helper", r.args...)
	st, err := m.startCommand(ctx, sb, ExecOptions{}, cmd, func() []string { return cmd }, nil)
	if err != nil {
		return 0, err
	}
	defer st.close()
	// The stream's reads do not see ctx: its end closes the stream.
	defer context.AfterFunc(ctx, st.close)()
	if err := st.copyOutput(OrDiscard(r.stdout), io.Discard); err != nil {
		return 0, err
	}
	return st.wait(ctx)
}
