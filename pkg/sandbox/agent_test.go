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
	req := "0\x000\x000\x000\x00\x001\x00true\x00"
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
// command's input ends (its terminal is hung up), so it sees the end and exits instead of
// waiting forever. A malformed resize (W) raises one.
func TestAgentHandlerExceptionEndsInput(t *testing.T) {
	m, sb := startHostAgent(t)
	for _, tty := range []bool{false, true} {
		t.Run(map[bool]string{false: "pipes", true: "terminal"}[tty], func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "ended")
			// A terminal's hang-up sends HUP, which must not end the shell before it says so.
			script := "trap 'touch " + mark + "' HUP; echo ready; cat >/dev/null; touch " + mark
			st, err := m.startAgent(context.Background(), sb, ExecOptions{TTY: tty}, []string{"sh", "-c", script}, &[2]uint{24, 80})
			if err != nil {
				t.Fatal(err)
			}
			defer st.close()
			var out bytes.Buffer
			for !strings.Contains(out.String(), "ready") {
				typ, body, err := st.next()
				if err != nil || typ != '1' {
					t.Fatalf("waiting for the command to start: %q %q %v", typ, body, err)
				}
				out.Write(body)
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
