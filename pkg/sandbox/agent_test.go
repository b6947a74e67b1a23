package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startHostAgent runs agent.py on the host, as the engine would run it in a sandbox, and
// returns a manager and a sandbox whose agent it is.
func startHostAgent(t *testing.T) (*Manager, *Sandbox) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 on the host to run the agent outside a sandbox")
	}
	m := &Manager{Now: time.Now, State: &StateStore{Dir: t.TempDir(), Now: time.Now}}
	sb := &Sandbox{Name: "host", Labels: map[string]string{LabelAgent: AgentVersion}}
	dir := m.agentDirOf(sb)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, agentCmd()[1:]...)
	cmd.Args[len(cmd.Args)-1] = dir
	cmd.Env = append(os.Environ(), agentEnv+"="+agentSource, "SBX_BASE=from-agent")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent stderr:\n%s", stderr.String())
		}
	})
	m.waitAgent(context.Background(), sb)
	if _, err := os.Stat(filepath.Join(dir, agentSocket)); err != nil {
		t.Fatalf("the agent did not come up: %v\n%s", err, stderr.String())
	}
	return m, sb
}

type agentRun struct {
	code           int
	stdout, stderr string
	err            error
}

func runOnAgent(t *testing.T, m *Manager, sb *Sandbox, opts ExecOptions, argv ...string) agentRun {
	t.Helper()
	st, err := m.startAgent(context.Background(), sb, opts, argv, nil)
	if err != nil {
		t.Fatalf("startAgent: %v", err)
	}
	defer st.close()
	if opts.Stdin != nil {
		go func() {
			_, _ = io.Copy(st, opts.Stdin)
			_ = st.closeStdin()
		}()
	}
	var out, errb bytes.Buffer
	if err := st.copyOutput(&out, &errb); err != nil {
		return agentRun{err: err, stdout: out.String(), stderr: errb.String()}
	}
	code, err := st.wait(context.Background())
	return agentRun{code: code, stdout: out.String(), stderr: errb.String(), err: err}
}

func TestAgentProtocol(t *testing.T) {
	m, sb := startHostAgent(t)

	r := runOnAgent(t, m, sb, ExecOptions{}, "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.err != nil || r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("streams and exit code: %+v", r)
	}

	odd := "quote' \"dq\" \\ \xff\xfe end"
	r = runOnAgent(t, m, sb, ExecOptions{Env: []string{"ODD=" + odd}}, "sh", "-c", `printf %s "$1|$ODD|$SBX_BASE|${SBX_AGENT-unset}"`, "sh", odd)
	if want := odd + "|" + odd + "|from-agent|unset"; r.stdout != want {
		t.Errorf("arguments and environment:\n got %q\nwant %q", r.stdout, want)
	}

	in := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB both ways: backpressure
	r = runOnAgent(t, m, sb, ExecOptions{Stdin: bytes.NewReader(in)}, "cat")
	if r.err != nil || r.code != 0 || r.stdout != string(in) {
		t.Errorf("16 MiB through cat: err %v code %d, %d bytes back", r.err, r.code, len(r.stdout))
	}

	r = runOnAgent(t, m, sb, ExecOptions{}, "sh", "-c", "kill -KILL $$")
	if r.code != 137 {
		t.Errorf("a command killed by a signal: %+v", r)
	}

	r = runOnAgent(t, m, sb, ExecOptions{WorkDir: "/no/such/dir"}, "true")
	var se *spawnError
	if !errors.As(r.err, &se) || se.errno != syscall.ENOENT {
		t.Errorf("a missing working directory: %+v", r)
	}
	r = runOnAgent(t, m, sb, ExecOptions{WorkDir: "/"}, "pwd")
	if r.stdout != "/\n" {
		t.Errorf("working directory: %+v", r)
	}
}

// A client that goes away closes the command's stdin: that is how sbx's wrapper learns that
// sbx was killed.
func TestAgentClientGoneClosesStdin(t *testing.T) {
	m, sb := startHostAgent(t)
	mark := filepath.Join(t.TempDir(), "eof")
	st, err := m.startAgent(context.Background(), sb, ExecOptions{}, []string{"sh", "-c", "cat >/dev/null; touch " + mark}, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	st.close()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(mark); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the command's stdin stayed open after the client went away")
}

// A terminal: the command has a controlling terminal of the size asked for.
func TestAgentTTY(t *testing.T) {
	m, sb := startHostAgent(t)
	st, err := m.startAgent(context.Background(), sb, ExecOptions{TTY: true}, []string{"sh", "-c", "tty; stty size; echo $TERM"}, &[2]uint{40, 100})
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	var out bytes.Buffer
	if err := st.copyOutput(&out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.ReplaceAll(out.String(), "\r", ""), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "/dev/pts/") || lines[1] != "40 100" || lines[2] != "xterm" {
		t.Errorf("output %q", out.String())
	}
}

// A socket in the agent directory that is not the agent's (a link, a stale file) is never
// used: the command falls back to the engine's exec.
func TestAgentDialRefusesLinks(t *testing.T) {
	m := &Manager{Now: time.Now, State: &StateStore{Dir: t.TempDir(), Now: time.Now}}
	sb := &Sandbox{Name: "x", Labels: map[string]string{LabelAgent: AgentVersion}}
	dir := m.agentDirOf(sb)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "real.sock")
	if err := os.Symlink(target, filepath.Join(dir, agentSocket)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.startAgent(context.Background(), sb, ExecOptions{}, []string{"true"}, nil); !errors.Is(err, errNoAgent) {
		t.Errorf("a link: want errNoAgent, got %v", err)
	}
	sb.Labels[LabelAgent] = "other-version"
	if _, err := m.startAgent(context.Background(), sb, ExecOptions{}, []string{"true"}, nil); !errors.Is(err, errNoAgent) {
		t.Errorf("another agent version: want errNoAgent, got %v", err)
	}
}

// With strictStdin, input that stops early (the client gone, or K after a read error) is
// never taken for a complete stream: the command is terminated before it could see an end.
func TestAgentStrictStdinCutIsNotEOF(t *testing.T) {
	m, sb := startHostAgent(t)
	for _, how := range []string{"client gone", "abort"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			script := "cat >/dev/null; touch " + filepath.Join(dir, "eof")
			st, err := m.startAgent(context.Background(), sb, ExecOptions{strictStdin: true}, []string{"sh", "-c", script}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Write([]byte("part of a stream")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if how == "abort" {
				st.abortStdin()
				_ = st.copyOutput(io.Discard, io.Discard)
				if code, _ := st.wait(context.Background()); code != 143 {
					t.Errorf("exit code %d, want 143 (TERM)", code)
				}
			}
			st.close()
			time.Sleep(500 * time.Millisecond)
			if _, err := os.Stat(filepath.Join(dir, "eof")); err == nil {
				t.Fatal("the command saw an end of input after a cut stream")
			}
		})
	}
}

// A command that owns its stdin (-i) cannot learn from it that sbx went away, even after
// its input ended: the agent terminates it.
func TestAgentInteractiveClientGoneTerminates(t *testing.T) {
	m, sb := startHostAgent(t)
	dir := t.TempDir()
	script := `trap 'touch ` + filepath.Join(dir, "term") + `; exit' TERM; while :; do sleep 0.1; done`
	st, err := m.startAgent(context.Background(), sb, ExecOptions{Interactive: true}, []string{"sh", "-c", script}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.closeStdin(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	st.close()
	for range 50 {
		if _, err := os.Stat(filepath.Join(dir, "term")); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the command was not terminated when its client went away")
}

// The agent's socket is open to anyone who reaches it; the directory above must not let
// other host users reach it, even if it was made open before.
func TestPrepareAgentDirIsPrivate(t *testing.T) {
	state := t.TempDir()
	parent := filepath.Join(state, "agent")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "web")
	if err := prepareAgentDir("web", dir); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{parent: 0o700, dir: 0o777} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", path, fi.Mode().Perm(), want)
		}
	}
}

// A request the agent cannot read costs that connection, not the agent.
func TestAgentSurvivesABadRequest(t *testing.T) {
	m, sb := startHostAgent(t)
	conn, err := dialAgentSocket(context.Background(), m.agentDirOf(sb))
	if err != nil {
		t.Fatal(err)
	}
	s := &agentStream{conn: conn, rd: bufio.NewReader(conn)}
	if err := s.hello(); err != nil {
		t.Fatal(err)
	}
	if err := s.send('R', []byte("not\x00a\x00request\x00")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.next(); err == nil {
		t.Error("the agent answered a bad request instead of closing the connection")
	}
	conn.Close()
	if r := runOnAgent(t, m, sb, ExecOptions{}, "echo", "still here"); r.stdout != "still here\n" {
		t.Errorf("after a bad request: %+v", r)
	}
}
