package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostAgent is agent.py run on the host, as the engine would run it in a sandbox.
type hostAgent struct {
	t    *testing.T
	m    *Manager
	sb   *Sandbox
	dir  string
	cmd  *exec.Cmd
	logs chan string // the agent's stderr, line by line
}

// startHostAgent runs agent.py on the host after making its sockets, as starting a sandbox
// does, hands it its socket, and returns a manager and a sandbox whose agent it is.
func startHostAgent(t *testing.T) (*Manager, *Sandbox) {
	t.Helper()
	a := newHostAgent(t)
	h := a.listen()
	a.run(0)
	if err := h.pass(context.Background(), agentWait); err != nil {
		t.Fatalf("handing the agent its socket: %v", err)
	}
	h.close(true)
	return a.m, a.sb
}

// newHostAgent prepares a state directory with a short path: the agent connects to its
// handoff.sock by name, and a Unix socket's name is at most 107 bytes.
func newHostAgent(t *testing.T) *hostAgent {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 on the host to run the agent outside a sandbox")
	}
	state, err := os.MkdirTemp("", "sbx-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	a := &hostAgent{t: t,
		m:  &Manager{Now: time.Now, State: &StateStore{Dir: state, Now: time.Now}},
		sb: &Sandbox{Name: "host", Labels: map[string]string{LabelAgent: AgentVersion}},
	}
	a.dir = a.m.agentDirOf(a.sb)
	if err := prepareAgentDir(a.sb.Name, a.dir, false); err != nil {
		t.Fatal(err)
	}
	return a
}

// listen makes the agent's sockets, as starting its sandbox does.
func (a *hostAgent) listen() *agentHandoff {
	a.t.Helper()
	h, err := listenHandoff(a.dir)
	if err != nil {
		a.t.Fatal(err)
	}
	return h
}

// run starts the agent; with nofile > 0 it may hold at most that many descriptors.
func (a *hostAgent) run(nofile int) {
	t := a.t
	t.Helper()
	argv := append([]string{"python3"}, agentCmd()[1:]...)
	argv[len(argv)-1] = a.dir
	if nofile > 0 {
		argv = append([]string{"sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$@"`, nofile), "sh"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), agentEnv+"="+agentSource, "SBX_BASE=from-agent")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.cmd, a.logs = cmd, make(chan string, 100)
	var logged []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logged = append(logged, sc.Text())
			select {
			case a.logs <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent stderr:\n%s", strings.Join(logged, "\n"))
		}
	})
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

// A client that goes away ends the command: its stdin closes (that is how sbx's wrapper
// learns that sbx was killed), and the agent ends it besides, so a command that killed its
// watchdog, or never reads its stdin, ends too. sbx's launchers of processes meant to
// outlive the exec (outlive) only see their stdin close.
func TestAgentClientGone(t *testing.T) {
	m, sb := startHostAgent(t)
	for _, tt := range []struct {
		name, script string
		opts         ExecOptions
	}{
		{"ended", `trap 'touch "$0"; exit' TERM; exec </dev/null; echo ready; while :; do sleep 0.05; done`, ExecOptions{}},
		{"outlive", `trap 'touch "$0.term"' TERM; echo ready; cat >/dev/null; touch "$0"`, ExecOptions{outlive: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "mark")
			st := startOnAgent(t, m, sb, tt.opts, "sh", "-c", tt.script, mark)
			readUntil(t, st, "ready\n")
			st.close()
			waitFile(t, mark, "the command went on after its client went away")
			if _, err := os.Stat(mark + ".term"); err == nil {
				t.Error("a command that outlives its exec got TERM when its client went away")
			}
		})
	}
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
			eof := filepath.Join(t.TempDir(), "eof")
			script := `echo "$$ $(cut -d' ' -f22 /proc/$$/stat)"; head -c 16 >/dev/null; echo got; cat >/dev/null; touch "$0"`
			st := startOnAgent(t, m, sb, ExecOptions{strictStdin: true}, "sh", "-c", script, eof)
			if _, err := st.Write([]byte("part of a stream")); err != nil {
				t.Fatal(err)
			}
			var p hostProc
			if _, err := fmt.Sscanf(readUntil(t, st, "got\n"), "%d %s", &p.pid, &p.start); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.kill)
			if how == "abort" {
				st.abortStdin()
				if r := finishOnAgent(t, st); r.code != 143 {
					t.Errorf("exit code %d, want 143 (TERM)", r.code)
				}
			}
			st.close()
			waitGone(t, p, "the command went on after its stream was cut")
			if _, err := os.Stat(eof); err == nil {
				t.Fatal("the command saw an end of input after a cut stream")
			}
		})
	}
}

// A command that owns its stdin (-i) cannot learn from it that sbx went away, even after
// its input ended: the agent terminates it.
func TestAgentInteractiveClientGoneTerminates(t *testing.T) {
	m, sb := startHostAgent(t)
	term := filepath.Join(t.TempDir(), "term")
	script := `trap 'touch "$0"; exit' TERM; cat >/dev/null; echo eof; while :; do sleep 0.1; done`
	st := startOnAgent(t, m, sb, ExecOptions{Interactive: true}, "sh", "-c", script, term)
	if err := st.closeStdin(); err != nil {
		t.Fatal(err)
	}
	readUntil(t, st, "eof\n")
	st.close()
	waitFile(t, term, "the command was not terminated when its client went away")
}

// waitGone waits for process p to end; the bound only fails a test whose process never does.
func waitGone(t *testing.T, p hostProc, what string) {
	t.Helper()
	for range 1200 {
		if !p.alive() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(what)
}

// The agent's directory must not let other host users reach handoff.sock, which anyone may
// open: the directory above is made private, even if it was made open before. The agent's
// own directory is open to the sandbox user only to reach handoff.sock (0755), except for a
// sandbox of an older sbx, whose agent binds its own socket there (0777).
func TestPrepareAgentDirIsPrivate(t *testing.T) {
	state := t.TempDir()
	parent := filepath.Join(state, "agent")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, legacy := filepath.Join(parent, "web"), filepath.Join(parent, "old")
	if err := prepareAgentDir("web", dir, false); err != nil {
		t.Fatal(err)
	}
	if err := prepareAgentDir("old", legacy, true); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{parent: 0o700, dir: 0o755, legacy: 0o777} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", path, fi.Mode().Perm(), want)
		}
	}
}

// A frame the agent does not take (an unknown type, more than MAX_FRAME bytes, a malformed
// or second request) is refused with X and the connection is dropped; it costs that
// connection, not the agent.
func TestAgentRefusesBadFrames(t *testing.T) {
	m, sb := startHostAgent(t)
	raw := func(typ byte, n int, body string) []byte {
		f := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(f[1:], uint32(n))
		return append(f, body...)
	}
	req := "0\x000\x000\x000\x000\x000\x001\x00\x001\x00true\x00"
	for _, tt := range []struct {
		name, want string
		frames     [][]byte
	}{
		{"unknown type", "unknown frame type b'Q'", [][]byte{raw('Q', 0, "")}},
		{"oversized", "of 67108864 bytes, more than 8388608", [][]byte{raw('I', 64<<20, "")}},
		{"malformed request", "malformed request", [][]byte{raw('R', 14, "not\x00a\x00request\x00")}},
		{"second request", "a second request", [][]byte{raw('R', len(req), req), raw('R', len(req), req)}},
		{"malformed resize", "internal error: ValueError", [][]byte{raw('R', len(req), req), raw('W', 3, "bad")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := dialAgentSocket(context.Background(), m.agentDirOf(sb))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			s := &agentStream{conn: conn, rd: bufio.NewReader(conn)}
			if err := s.hello(); err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.frames {
				if _, err := conn.Write(f); err != nil {
					t.Fatal(err)
				}
			}
			// A deadline only so that an agent that never answers fails the test.
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var refusal string
			for {
				typ, body, err := s.next()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("want the connection dropped after X, got %v (X: %q)", err, refusal)
					}
					break
				}
				if refusal != "" {
					t.Errorf("a frame %q after X", typ)
				}
				if typ == 'X' {
					refusal = string(body)
				}
			}
			if !strings.Contains(refusal, tt.want) {
				t.Errorf("X %q, want it to say %q", refusal, tt.want)
			}
		})
	}
	if r := runOnAgent(t, m, sb, ExecOptions{}, "echo", "still here"); r.stdout != "still here\n" {
		t.Errorf("after bad frames: %+v", r)
	}
}

// waitFile waits for a file a command creates; the bound only fails a test whose command
// never gets there.
func waitFile(t *testing.T, path, what string) {
	t.Helper()
	for range 600 {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(what)
}

// An exception in a handler drops the connection as a client that goes away does: the
// command's input ends (its terminal is hung up) and the agent ends the command, so it
// never waits forever. A malformed resize (W) raises one.
func TestAgentHandlerExceptionEndsInput(t *testing.T) {
	m, sb := startHostAgent(t)
	for _, tty := range []bool{false, true} {
		t.Run(map[bool]string{false: "pipes", true: "terminal"}[tty], func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "ended")
			// A terminal's hang-up sends HUP, the agent TERM: neither may end the shell before
			// it says so.
			script := "trap 'touch " + mark + "; exit' HUP TERM; echo ready; cat >/dev/null; touch " + mark
			st, err := m.startAgent(context.Background(), sb, ExecOptions{TTY: tty}, []string{"sh", "-c", script}, &[2]uint{24, 80})
			if err != nil {
				t.Fatal(err)
			}
			defer st.close()
			var out bytes.Buffer
			for !strings.Contains(out.String(), "ready") {
				typ, body, err := st.next()
				if err != nil || typ != '1' && typ != 'P' {
					t.Fatalf("waiting for the command to start: %q %q %v", typ, body, err)
				}
				if typ == '1' {
					out.Write(body)
				}
			}
			if err := st.send('W', []byte("bad")); err != nil {
				t.Fatal(err)
			}
			// A deadline only so that an agent that keeps the connection fails the test.
			_ = st.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			err = st.copyOutput(io.Discard, io.Discard)
			if !errors.Is(err, errAgentProtocol) || !strings.Contains(err.Error(), "internal error") {
				t.Errorf("want the agent's X frame as an error, got %v", err)
			}
			waitFile(t, mark, "the command's input stayed open after the agent dropped its connection")
		})
	}
}

// Starting a sandbox: sbx makes agent.sock and handoff.sock, the agent connects to the
// second and takes the first's listener. A client that dials agent.sock before the agent
// runs waits in its backlog and is served by the agent, never taken for it; afterwards the
// directory holds the socket alone, and no command inherits the listener.
func TestAgentHandoff(t *testing.T) {
	a := newHostAgent(t)
	h := a.listen()
	early, err := dialAgentSocket(context.Background(), a.dir)
	if err != nil {
		t.Fatalf("dialling agent.sock before the agent runs: %v", err)
	}
	defer early.Close()
	a.run(0)
	if err := h.pass(context.Background(), agentWait); err != nil {
		t.Fatal(err)
	}
	h.close(true)
	s := &agentStream{conn: early, rd: bufio.NewReader(early)}
	_ = early.SetReadDeadline(time.Now().Add(30 * time.Second))
	if typ, body, err := s.next(); err != nil || typ != 'H' || string(body) != AgentVersion {
		t.Fatalf("the early client's greeting: %q %q %v", typ, body, err)
	}
	entries, err := os.ReadDir(a.dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != agentSocket {
		t.Errorf("the agent directory after the hand-off: %v %v", entries, err)
	}
	if fi, err := os.Stat(filepath.Join(a.dir, agentSocket)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("agent.sock: %v %v", fi, err)
	}
	// (A host test's agent may inherit descriptors from the test's environment; none is a socket.)
	r := runOnAgent(t, a.m, a.sb, ExecOptions{}, "sh", "-c", `for f in /proc/$$/fd/*; do readlink "$f"; done; echo end`)
	if !strings.HasSuffix(r.stdout, "end\n") || strings.Contains(r.stdout, "socket:") {
		t.Errorf("a command's descriptors: %+v", r)
	}
}

// A sandbox started by something other than sbx (docker start) has nobody at handoff.sock,
// or only the socket a killed sbx left, which refuses: its agent says so and keeps the
// sandbox running, and commands go through the engine's exec. The next start makes both
// sockets again over what was left.
func TestAgentWithoutHandoff(t *testing.T) {
	for _, left := range []string{"nothing", "a killed sbx's sockets"} {
		t.Run(left, func(t *testing.T) {
			a := newHostAgent(t)
			if left != "nothing" {
				// sbx killed after making the sockets: the kernel closes its descriptors, the
				// names stay.
				a.listen().close(true)
				_ = unixBindLeftover(t, a.dir)
			}
			a.run(0)
			waitLog(t, a, "no socket from sbx")
			if st := procState(t, a.cmd.Process.Pid); st == "Z" {
				t.Fatal("the agent exited without a socket; the sandbox would stop")
			}
			_, err := a.m.startAgent(context.Background(), a.sb, ExecOptions{}, []string{"true"}, nil)
			if !errors.Is(err, errNoAgent) || !strings.Contains(err.Error(), "did not answer") {
				t.Errorf("want errNoAgent saying the agent did not answer, got %v", err)
			}
		})
	}
	// The next start is not blocked by what is left.
	m, sb := startHostAgent(t)
	if r := runOnAgent(t, m, sb, ExecOptions{}, "echo", "ok"); r.stdout != "ok\n" {
		t.Errorf("after a start over leftovers: %+v", r)
	}
}

// unixBindLeftover leaves handoff.sock in dir as a killed sbx would: a socket file nobody
// listens on.
func unixBindLeftover(t *testing.T, dir string) error {
	t.Helper()
	h, err := listenHandoff(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Close the listeners without removing the names, as the kernel does for a dead process.
	h.ho.Close()
	syscall.Close(h.lfd)
	syscall.Close(h.dfd)
	for _, n := range []string{agentSocket, handoffSocket} {
		if fi, err := os.Lstat(filepath.Join(dir, n)); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Fatalf("%s was not left: %v %v", n, fi, err)
		}
	}
	return nil
}

// waitLog waits for a line of the agent's stderr that contains want.
func waitLog(t *testing.T, a *hostAgent, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-a.logs:
			if strings.Contains(line, want) {
				return
			}
		case <-timeout:
			t.Fatalf("the agent never logged %q", want)
		}
	}
}

// procState is the state letter of process pid (R, S, Z, ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	return rest[:1]
}

// cpuTime is the CPU time process pid has used.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest) // from field 3, state
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// An agent out of descriptors (EMFILE) leaves a connection waiting instead of spinning on a
// listener that stays readable, and takes it once a descriptor is free.
func TestAgentOutOfDescriptors(t *testing.T) {
	const nofile = 16
	a := newHostAgent(t)
	h := a.listen()
	a.run(nofile)
	if err := h.pass(context.Background(), agentWait); err != nil {
		t.Fatal(err)
	}
	h.close(true)
	pid := a.cmd.Process.Pid
	// The descriptors below the limit that the agent holds: the interpreter's, the listener,
	// epoll, the signal pipe, any it inherited, and one per connection.
	holds := func() int {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, fd := range fds {
			if i, err := strconv.Atoi(fd.Name()); err == nil && i < nofile {
				n++
			}
		}
		return n
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	greet := func(c net.Conn) error {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		s := &agentStream{conn: c, rd: bufio.NewReader(c)}
		typ, _, err := s.next()
		if err == nil && typ != 'H' {
			err = fmt.Errorf("frame %q", typ)
		}
		return err
	}
	for holds() < nofile { // a greeted connection holds one more descriptor of the agent's
		c, err := dialAgentSocket(context.Background(), a.dir)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if err := greet(c); err != nil {
			t.Fatalf("connection %d: %v", len(held), err)
		}
	}
	waiting, err := dialAgentSocket(context.Background(), a.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	// The agent now fails to accept it with EMFILE. Spinning would burn the CPU for the
	// whole window; a paused agent wakes once a second at most.
	before := cpuTime(t, pid)
	time.Sleep(2 * time.Second)
	used := cpuTime(t, pid) - before
	t.Logf("CPU used in 2s out of descriptors: %s", used)
	if used > 200*time.Millisecond {
		t.Errorf("the agent used %s of CPU in 2s while out of descriptors: it spins", used)
	}
	_ = waiting.SetReadDeadline(time.Unix(1, 0)) // what has arrived, without waiting
	if n, _ := waiting.Read(make([]byte, 1)); n > 0 {
		t.Fatal("the agent greeted a connection beyond its descriptors: the test did not exhaust them")
	}
	held[0].Close()
	if err := greet(waiting); err != nil {
		t.Fatalf("the waiting connection once a descriptor was free: %v", err)
	}
}

// sbx takes from the agent only the frames it knows, of at most maxAgentFrame bytes: another
// type, a longer frame, an X (the agent gave up) or an unreadable exit status ends the
// command with an error saying so, and sbx drops the connection.
func TestAgentClientRefusesBadFrames(t *testing.T) {
	raw := func(typ byte, n int, body string) []byte {
		f := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(f[1:], uint32(n))
		return append(f, body...)
	}
	for _, tt := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"unknown type", raw('Q', 2, "hi"), `frame of unknown type 'Q'`},
		{"a second greeting", raw('H', len(AgentVersion), AgentVersion), `frame of unknown type 'H'`},
		{"oversized", raw('1', maxAgentFrame+1, ""), "a frame of 1048577 bytes, more than 1048576"},
		{"the agent gave up", raw('X', 21, "internal error: \x1b[31m"), `the agent dropped the command: internal error: \x1b[31m`},
		{"unreadable exit status", raw('Z', 3, "abc"), `exit status "abc"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, sb, dropped := fakeAgent(t, tt.frame)
			_, err := m.Exec(context.Background(), sb, ExecOptions{Cmd: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard})
			if err == nil || !errors.Is(err, errAgentProtocol) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a protocol error saying %q", err, tt.want)
			}
			if err := <-dropped; err != nil {
				t.Error(err)
			}
		})
	}
}

// fakeAgent serves one connection at a sandbox's agent.sock as an agent would, greeting and
// taking the request, then sends frame. dropped reports whether sbx then closed the
// connection.
func fakeAgent(t *testing.T, frame []byte) (*Manager, *Sandbox, <-chan error) {
	t.Helper()
	state, err := os.MkdirTemp("", "sbx-fake-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	m := &Manager{Now: time.Now, State: &StateStore{Dir: state, Now: time.Now}}
	sb := &Sandbox{Name: "fake", Labels: map[string]string{LabelAgent: AgentVersion}}
	dir := m.agentDirOf(sb)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, agentSocket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dropped := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			dropped <- err
			return
		}
		defer c.Close()
		hello := append([]byte{'H', 0, 0, 0, byte(len(AgentVersion))}, AgentVersion...)
		var hdr [5]byte
		_, err = c.Write(hello)
		if err == nil {
			_, err = io.ReadFull(c, hdr[:])
		}
		if err == nil {
			_, err = io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[1:])))
		}
		if err == nil {
			_, err = c.Write(frame)
		}
		if err != nil {
			dropped <- err
			return
		}
		// Only so that a client that never drops it fails the test.
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			dropped <- fmt.Errorf("sbx did not drop the connection: %v", err)
			return
		}
		dropped <- nil
	}()
	return m, sb, dropped
}

// startOnAgent starts argv on the agent; the connection is closed when the test ends.
func startOnAgent(t *testing.T, m *Manager, sb *Sandbox, opts ExecOptions, argv ...string) *agentStream {
	t.Helper()
	st, err := m.startAgent(context.Background(), sb, opts, argv, nil)
	if err != nil {
		t.Fatalf("startAgent: %v", err)
	}
	t.Cleanup(st.close)
	return st
}

// readUntil reads the command's frames until its stdout holds want, and returns that stdout.
// The read deadline only fails a test whose command never prints it.
func readUntil(t *testing.T, st *agentStream, want string) string {
	t.Helper()
	_ = st.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer func() { _ = st.conn.SetReadDeadline(time.Time{}) }()
	var out strings.Builder
	for !strings.Contains(out.String(), want) {
		typ, body, err := st.next()
		if err != nil {
			t.Fatalf("waiting for %q: %v (stdout so far %q)", want, err, out.String())
		}
		switch typ {
		case '1':
			out.Write(body)
		case 'P':
			if _, err := fmt.Sscanf(string(body), "%d %d %d", &st.started[0], &st.started[1], &st.started[2]); err != nil {
				t.Fatalf("P frame %q: %v", body, err)
			}
		case '2':
		default:
			t.Fatalf("waiting for %q: frame %q %q (stdout so far %q)", want, typ, body, out.String())
		}
	}
	return out.String()
}

// finishOnAgent reads the rest of the command's output and its exit code. The read deadline
// only fails a test whose command never ends.
func finishOnAgent(t *testing.T, st *agentStream) agentRun {
	t.Helper()
	_ = st.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	var out, errb bytes.Buffer
	if err := st.copyOutput(&out, &errb); err != nil {
		return agentRun{err: err, stdout: out.String(), stderr: errb.String()}
	}
	code, err := st.wait(context.Background())
	return agentRun{code: code, stdout: out.String(), stderr: errb.String(), err: err}
}

// hostProc is a process on the host, named by its pid and start time so that a reused pid is
// never taken for it.
type hostProc struct {
	kind  string
	pid   int
	start string
}

// alive reports whether p still runs (a zombie does not).
func (p hostProc) alive() bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return false
	}
	start, err := statStart(data)
	_, rest, _ := strings.Cut(string(data[bytes.LastIndexByte(data, ')'):]), ") ")
	return err == nil && start == p.start && !strings.HasPrefix(rest, "Z")
}

// kill ends p if it is still that process; for what a test leaves running on purpose.
func (p hostProc) kill() {
	if p.alive() {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// noted reads the processes an escapee script noted in dir, one file each: "PID START".
func noted(t *testing.T, dir string, kinds ...string) []hostProc {
	t.Helper()
	var ps []hostProc
	for _, k := range kinds {
		data, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil {
			t.Fatalf("the %s process noted nothing: %v", k, err)
		}
		p := hostProc{kind: k}
		if _, err := fmt.Sscanf(string(data), "%d %s", &p.pid, &p.start); err != nil {
			t.Fatalf("%s: %q: %v", k, data, err)
		}
		t.Cleanup(p.kill)
		ps = append(ps, p)
	}
	return ps
}

// escapees starts processes that try to outlive the command, each ignoring TERM, holding the
// command's stdout and noting "PID START" in a file of dir named after it: "group" stays in
// the command's process group, "pgrp" makes a group of its own in the command's session,
// and "daemon" leaves the session (setsid) and is orphaned by a double fork; it notes itself
// once its first parent is gone. "main" is the command itself, which says ready once all
// are noted. With exit 1 the command exits then, else it waits forever, ignoring TERM too.
const escapees = `
import os, signal, sys, time
d, leave = sys.argv[1], sys.argv[2] == "1"
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def note(kind):
    with open("/proc/self/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    with open(os.path.join(d, kind + ".tmp"), "w") as f:
        f.write("%d %s" % (os.getpid(), start))
    os.rename(os.path.join(d, kind + ".tmp"), os.path.join(d, kind))
def forever():
    while True:
        time.sleep(1)
if os.fork() == 0:
    note("group"); forever()
if os.fork() == 0:
    os.setpgid(0, 0); note("pgrp"); forever()
if os.fork() == 0:
    os.setsid()
    first = os.getpid()
    if os.fork() == 0:
        while os.getppid() == first:
            time.sleep(0.01)
        note("daemon"); forever()
    os._exit(0)
note("main")
while not all(os.path.exists(os.path.join(d, k)) for k in ("group", "pgrp", "daemon")):
    time.sleep(0.01)
print("ready", flush=True)
if leave:
    os._exit(0)
forever()
`

// At its timeout the agent sends T and TERM to the command, then KILL after the grace period
// to what ignored the TERM, and reports how the command ended. P names the command.
func TestAgentTimeout(t *testing.T) {
	m, sb := startHostAgent(t)
	for _, tt := range []struct {
		name, script string
		code         int
	}{
		{"TERM", `trap 'echo term; exit 3' TERM; echo $$ ready; while :; do sleep 0.05; done`, 3},
		{"KILL", `trap '' TERM; echo $$ ready; while :; do sleep 0.05; done`, 137},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := startOnAgent(t, m, sb, ExecOptions{Timeout: 300 * time.Millisecond, grace: 300 * time.Millisecond}, "sh", "-c", tt.script)
			out := readUntil(t, st, "ready\n")
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", st.started[0]))
			if err != nil {
				t.Fatal(err)
			}
			start, _ := statStart(data)
			f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
			if out != fmt.Sprintf("%d ready\n", st.started[0]) || strconv.Itoa(st.started[1]) != start || strconv.Itoa(st.started[2]) != f[1] {
				t.Errorf("P %v, the command says %q, started at %s, its parent %s", st.started, out, start, f[1])
			}
			r := finishOnAgent(t, st)
			if r.err != nil || r.code != tt.code || !st.timedOut() {
				t.Errorf("want exit %d and T: %+v, T %v", tt.code, r, st.timedOut())
			}
		})
	}
}

// What a command leaves at its timeout is ended with it, however it got away from its
// group: in its group ignoring TERM, in a group of its own, in a session of its own after a
// double fork (which brings it back to the command, a subreaper). Each held the command's
// output open; the agent still reports.
func TestAgentTimeoutEndsEscapees(t *testing.T) {
	m, sb := startHostAgent(t)
	dir := t.TempDir()
	st := startOnAgent(t, m, sb, ExecOptions{Timeout: 500 * time.Millisecond, grace: 500 * time.Millisecond}, "python3", "-c", escapees, dir, "0")
	readUntil(t, st, "ready\n")
	ps := noted(t, dir, "main", "group", "pgrp", "daemon")
	r := finishOnAgent(t, st)
	if r.err != nil || r.code != 137 || !st.timedOut() {
		t.Errorf("want exit 137 and T: %+v, T %v", r, st.timedOut())
	}
	for _, p := range ps {
		waitGone(t, p, fmt.Sprintf("the %s process (%d) outlived the command's timeout", p.kind, p.pid))
	}
}

// When a command exits, what is left in its group and session is ended; what left both and
// was orphaned can no longer be told from anyone else's, so it stays, and the agent reports
// the exit once the rest is gone, even while it holds the command's output open.
func TestAgentExitEndsGroupNotDaemons(t *testing.T) {
	m, sb := startHostAgent(t)
	dir := t.TempDir()
	st := startOnAgent(t, m, sb, ExecOptions{grace: 300 * time.Millisecond}, "python3", "-c", escapees, dir, "1")
	readUntil(t, st, "ready\n")
	ps := noted(t, dir, "main", "group", "pgrp", "daemon")
	r := finishOnAgent(t, st)
	if r.err != nil || r.code != 0 || st.timedOut() {
		t.Errorf("want exit 0 without T: %+v, T %v", r, st.timedOut())
	}
	for _, p := range ps {
		if p.kind == "daemon" {
			if !p.alive() {
				t.Error("the daemon was ended: the README says it is not")
			}
			continue
		}
		waitGone(t, p, fmt.Sprintf("the %s process (%d) outlived the command", p.kind, p.pid))
	}
}

// A command that outlives its exec on purpose (outlive: a shell session's launcher) is no
// subreaper: what it orphans is not its to end, and holding its output open does not keep
// the agent from reporting its timeout.
func TestAgentOutliveTimeoutReports(t *testing.T) {
	m, sb := startHostAgent(t)
	dir := t.TempDir()
	script := `setsid -f sh -c 'echo "$$ $(cut -d" " -f22 /proc/$$/stat)" >"$1/d.tmp"; mv "$1/d.tmp" "$1/daemon"; exec sleep 1000' sh "$0"
while [ ! -e "$0/daemon" ]; do sleep 0.01; done; trap '' TERM; echo ready; while :; do sleep 0.05; done`
	st := startOnAgent(t, m, sb, ExecOptions{outlive: true, Timeout: 300 * time.Millisecond, grace: 300 * time.Millisecond}, "sh", "-c", script, dir)
	readUntil(t, st, "ready\n")
	d := noted(t, dir, "daemon")[0]
	r := finishOnAgent(t, st)
	if r.err != nil || r.code != 137 || !st.timedOut() {
		t.Errorf("want exit 137 and T: %+v, T %v", r, st.timedOut())
	}
	if !d.alive() {
		t.Error("a process a launcher orphaned was ended with it")
	}
}

// Ending a command at its timeout never touches another command's processes.
func TestAgentTimeoutSparesOthers(t *testing.T) {
	m, sb := startHostAgent(t)
	other := startOnAgent(t, m, sb, ExecOptions{}, "sh", "-c", `echo "$$ $(cut -d" " -f22 /proc/$$/stat) ready"; exec sleep 1000`)
	var p hostProc
	if _, err := fmt.Sscanf(readUntil(t, other, "ready\n"), "%d %s", &p.pid, &p.start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	st := startOnAgent(t, m, sb, ExecOptions{Timeout: 300 * time.Millisecond, grace: 300 * time.Millisecond}, "sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	readUntil(t, st, "ready\n")
	if r := finishOnAgent(t, st); r.code != 137 || !st.timedOut() {
		t.Errorf("want exit 137 and T: %+v", r)
	}
	if !p.alive() {
		t.Fatal("another command's process was ended with the one that timed out")
	}
	other.close()
	waitGone(t, p, "the other command went on after its client went away")
}
