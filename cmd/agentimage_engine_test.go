package cmd

import (
	"strings"
	"testing"
	"time"
)

// A sandbox on bare Debian (no python, none of sbx's tools) has the agent: sbx's own binary,
// mounted into it. Commands plain, with -i and with -t go through it: their parent is the
// agent, as its command line in /proc says.
func TestCLIAgentOnBareImage(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-bare"
	if r := c.Run("create", "-n", name, "--image", "debian:bookworm-slim"); r.Code != 0 {
		t.Fatalf("create: exit %d, stderr %q", r.Code, r.Stderr)
	}
	const parent = `tr '\0' ' ' </proc/$PPID/cmdline; echo`
	const agent = "/run/sbx-agent-bin/sbx __agent /run/sbx-agent "
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", parent); r.Code != 0 || !strings.HasPrefix(r.Stdout, agent) {
		t.Errorf("exec: exit %d, parent %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}

	cmd := c.Cmd("exec", "-i", "-n", name, "--", "sh", "-c", "cat; "+parent)
	cmd.Stdin = strings.NewReader("from stdin\n")
	if r := c.RunIn(cmd); r.Code != 0 || !strings.HasPrefix(r.Stdout, "from stdin\n"+agent) {
		t.Errorf("exec -i: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}

	cmd = c.Cmd("exec", "-it", "-n", name, "--", "sh", "-c", "tty; stty size; "+parent+"; echo ready; read -r line; echo got:$line")
	term := c.StartOnTerminal(cmd, 40, 100)
	for i := 0; !strings.Contains(term.Output(), "ready"); i++ {
		if i == 600 { // only fails a command that never gets there
			_ = cmd.Process.Kill()
			t.Fatalf("exec -it never said ready:\n%s", term.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, _ = term.Write([]byte("hello\r"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exec -it: %v\n%s", err, term.Output())
	}
	s := strings.ReplaceAll(term.Closed(), "\r", "")
	for _, want := range []string{"/dev/pts/", "40 100", "\n" + agent, "got:hello"} {
		if !strings.Contains(s, want) {
			t.Errorf("exec -it output lacks %q:\n%q", want, s)
		}
	}
}
