package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent/agenttest"
	"github.com/sbx-sandbox/sbx/pkg/agent/shim"
)

func TestMain(m *testing.M) {
	if err := inheritNothing(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	agenttest.RemoveBinary()
	os.Exit(code)
}

// inheritNothing keeps the descriptors this test binary inherited (a CI runner leaks some
// into its jobs) from reaching the agents it starts: in a sandbox the agent gets only its
// stdio, and the tests that count its descriptors against a limit must see the same.
func inheritNothing() error {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, fd := range fds {
		if n, err := strconv.Atoi(fd.Name()); err == nil && n > 2 {
			syscall.CloseOnExec(n)
		}
	}
	return nil
}

// hostAgent is the agent (the sbx binary) run on the host, as the engine would run it in a
// sandbox.
type hostAgent struct {
	t    *testing.T
	dir  string
	cmd  *exec.Cmd
	logs chan string // the agent's stderr, line by line
	path string      // the agent's PATH directory (agent.Cmd)
	// ownSocket runs the agent with OwnSocket, as under gVisor: it binds agent.sock itself.
	ownSocket bool
}

// startHostAgent runs the agent on the host after making its sockets, as starting a sandbox
// does, and hands it its socket; with nofile > 0 it may hold at most that many descriptors.
func startHostAgent(t *testing.T, nofile int) *hostAgent {
	t.Helper()
	return newHostAgent(t).launch(nofile)
}

// launch runs the prepared agent and hands it its socket.
func (a *hostAgent) launch(nofile int) *hostAgent {
	t := a.t
	t.Helper()
	h := a.listen()
	a.run(nofile)
	if err := h.Pass(context.Background(), 10*time.Second); err != nil {
		t.Fatalf("handing the agent its socket: %v", err)
	}
	h.Close(true)
	return a
}

// newHostAgent prepares an agent directory with a short path: the agent connects to its
// handoff.sock by name, and a Unix socket's name is at most 107 bytes. The directory above
// is private, as sbx's state directory is.
func newHostAgent(t *testing.T) *hostAgent {
	t.Helper()
	state, err := os.MkdirTemp("", "sbx-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	dir := filepath.Join(state, "host")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &hostAgent{t: t, dir: dir}
}

// listen makes the agent's sockets, as starting its sandbox does.
func (a *hostAgent) listen() *Handoff {
	a.t.Helper()
	h, err := ListenHandoff(a.dir)
	if err != nil {
		a.t.Fatal(err)
	}
	return h
}

// run starts the agent; with nofile > 0 it may hold at most that many descriptors.
func (a *hostAgent) run(nofile int) {
	t := a.t
	t.Helper()
	argv := Cmd(agenttest.Binary(t), a.dir, 0, a.path, a.ownSocket, "")
	if nofile > 0 {
		argv = append([]string{"sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$@"`, nofile), "sh"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "SBX_BASE=from-agent")
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

// dial connects to the agent and takes its greeting; the connection is closed when the test
// ends.
func (a *hostAgent) dial(t *testing.T) *Client {
	t.Helper()
	c, err := Dial(context.Background(), a.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	return c
}

// start sends req on a new connection.
func (a *hostAgent) start(t *testing.T, req Request) *Client {
	t.Helper()
	c := a.dial(t)
	if err := c.Start(req.Encode(), false); err != nil {
		t.Fatal(err)
	}
	return c
}

// command is a request as sbx makes it for a plain command: no terminal, no timeout, ended
// with its client.
func command(argv ...string) Request {
	return Request{Grace: 5 * time.Second, Reap: true, Argv: argv}
}

type agentRun struct {
	code           int
	stdout, stderr string
	err            error
}

// exec runs req to its end, with stdin (when not nil) as its input.
func (a *hostAgent) exec(t *testing.T, req Request, stdin io.Reader) agentRun {
	t.Helper()
	c := a.start(t, req)
	if stdin != nil {
		go func() {
			_, _ = io.Copy(c, stdin)
			_ = c.CloseStdin()
		}()
	}
	return finish(t, c)
}

// serves checks that the agent runs and serves a new connection.
func (a *hostAgent) serves(t *testing.T) {
	t.Helper()
	if st := procState(t, a.cmd.Process.Pid); st == "Z" {
		t.Fatal("the agent exited")
	}
	if r := a.exec(t, command("echo", "still here"), nil); r.err != nil || r.stdout != "still here\n" {
		t.Errorf("a new connection: %+v (%v)", r, r.err)
	}
}

// spare waits for the agent's spare shim (started once the agent has nothing else to do)
// and returns its pid. The deadline only fails an agent that never starts one.
func (a *hostAgent) spare(t *testing.T) int {
	t.Helper()
	want := "\x00" + shim.Mode + "\x00" + shim.Spare + "\x00"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// A child is listed under the thread that forked it.
		lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", a.cmd.Process.Pid))
		var kids []string
		for _, l := range lists {
			b, _ := os.ReadFile(l)
			kids = append(kids, strings.Fields(string(b))...)
		}
		for _, f := range kids {
			if line, _ := os.ReadFile("/proc/" + f + "/cmdline"); strings.HasSuffix(string(line), want) {
				pid, _ := strconv.Atoi(f)
				return pid
			}
		}
	}
	t.Fatal("the agent started no spare shim")
	return 0
}

// finish reads the rest of the command's output and its exit code. The read deadline only
// fails a test whose command never ends.
func finish(t *testing.T, c *Client) agentRun {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	var out, errb bytes.Buffer
	if err := c.CopyOutput(&out, &errb); err != nil {
		return agentRun{err: err, stdout: out.String(), stderr: errb.String()}
	}
	r := agentRun{stdout: out.String(), stderr: errb.String()}
	if code, ok := c.Exit(); ok {
		r.code = code
	} else {
		r.err = io.ErrUnexpectedEOF
	}
	return r
}

// readUntil reads the command's frames until its stdout holds want, and returns that stdout.
// The read deadline only fails a test whose command never prints it.
func readUntil(t *testing.T, c *Client, want string) string {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer func() { _ = c.conn.SetReadDeadline(time.Time{}) }()
	var out strings.Builder
	for !strings.Contains(out.String(), want) {
		typ, body, err := c.next()
		if err != nil {
			t.Fatalf("waiting for %q: %v (stdout so far %q)", want, err, out.String())
		}
		switch typ {
		case FrameStdout:
			out.Write(body)
		case FrameProcess:
			var p Process
			if _, err := fmt.Sscanf(string(body), "%d %d %d", &p.Pid, &p.Start, &p.Agent); err != nil {
				t.Fatalf("P frame %q: %v", body, err)
			}
			c.pmu.Lock()
			c.started = p
			c.pmu.Unlock()
		case FrameStderr:
		default:
			t.Fatalf("waiting for %q: frame %q %q (stdout so far %q)", want, typ, body, out.String())
		}
	}
	return out.String()
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

// procStat is process pid's /proc/PID/stat from field 3, its state, on.
func procStat(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	return strings.Fields(rest)
}

// procState is the state letter of process pid (R, S, Z, ...).
func procState(t *testing.T, pid int) string { return procStat(t, pid)[0] }

func TestAgentProtocol(t *testing.T) {
	a := startHostAgent(t, 0)

	r := a.exec(t, command("sh", "-c", "echo out; echo err >&2; exit 3"), nil)
	if r.err != nil || r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("streams and exit code: %+v", r)
	}

	odd := "quote' \"dq\" \\ \xff\xfe end"
	req := command("sh", "-c", `printf %s "$1|$ODD|$SBX_BASE|${SBX_AGENT-unset}"`, "sh", odd)
	req.Env = []string{"ODD=" + odd}
	r = a.exec(t, req, nil)
	if want := odd + "|" + odd + "|from-agent|unset"; r.stdout != want {
		t.Errorf("arguments and environment:\n got %q\nwant %q", r.stdout, want)
	}

	in := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB both ways: backpressure
	r = a.exec(t, command("cat"), bytes.NewReader(in))
	if r.err != nil || r.code != 0 || r.stdout != string(in) {
		t.Errorf("16 MiB through cat: err %v code %d, %d bytes back", r.err, r.code, len(r.stdout))
	}

	// No input: its end goes with the request, so cat ends at once, and a command done
	// before the client's next write never meets a closed connection.
	for range 20 {
		c := a.dial(t)
		if err := c.Start(command("cat").Encode(), true); err != nil {
			t.Fatalf("a request without input: %v", err)
		}
		if r := finish(t, c); r.err != nil || r.code != 0 || r.stdout != "" {
			t.Fatalf("cat without input: %+v", r)
		}
		c.Close()
	}

	r = a.exec(t, command("sh", "-c", "kill -KILL $$"), nil)
	if r.code != 137 {
		t.Errorf("a command killed by a signal: %+v", r)
	}

	req = command("true")
	req.Dir = "/no/such/dir"
	r = a.exec(t, req, nil)
	var se *SpawnError
	if !errors.As(r.err, &se) || se.Errno != syscall.ENOENT || se.Exec {
		t.Errorf("a missing working directory: %+v (exec %v)", r, se != nil && se.Exec)
	}
	// The command's own exec: what sbx reports as the shell does, 127 or 126.
	notExec := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(notExec, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, errno := range map[string]syscall.Errno{"no-such-command": syscall.ENOENT, "/no/such/file": syscall.ENOENT, notExec: syscall.EACCES} {
		r = a.exec(t, command(name), nil)
		if se = nil; !errors.As(r.err, &se) || se.Errno != errno || !se.Exec {
			t.Errorf("exec of %s: want errno %d from the exec: %+v (%+v)", name, errno, r, se)
		}
	}
	req = command("pwd")
	req.Dir = "/"
	if r = a.exec(t, req, nil); r.stdout != "/\n" {
		t.Errorf("working directory: %+v", r)
	}
}

// The agent's PATH directory ends every command's PATH, the request's own included, once.
func TestAgentPathDirectory(t *testing.T) {
	a := newHostAgent(t)
	a.path = "/opt/sbx-tools-test/bin"
	a.launch(0)
	for _, tt := range []struct{ env, want string }{
		{"", os.Getenv("PATH") + ":/opt/sbx-tools-test/bin"},
		{"PATH=/x:/y", "/x:/y:/opt/sbx-tools-test/bin"},
		{"PATH=/opt/sbx-tools-test/bin:/x", "/opt/sbx-tools-test/bin:/x"},
	} {
		req := command("/bin/sh", "-c", `printf %s "$PATH"`)
		if tt.env != "" {
			req.Env = []string{tt.env}
		}
		if r := a.exec(t, req, nil); r.err != nil || r.stdout != tt.want {
			t.Errorf("PATH with %q: got %q (%v), want %q", tt.env, r.stdout, r.err, tt.want)
		}
	}
}

// A client that goes away ends the command: its stdin closes (that is how sbx's wrapper
// learns that sbx was killed), and the agent ends it besides, so a command that killed its
// watchdog, or never reads its stdin, ends too. Without reap (sbx's launchers of processes
// meant to outlive the exec) the command only sees its stdin close.
func TestAgentClientGone(t *testing.T) {
	a := startHostAgent(t, 0)
	for _, tt := range []struct {
		name, script string
		reap         bool
	}{
		{"ended", `trap 'touch "$0"; exit' TERM; exec </dev/null; echo ready; while :; do sleep 0.05; done`, true},
		{"no reap", `trap 'touch "$0.term"' TERM; echo ready; cat >/dev/null; touch "$0"`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "mark")
			req := command("sh", "-c", tt.script, mark)
			req.Reap = tt.reap
			c := a.start(t, req)
			readUntil(t, c, "ready\n")
			c.Close()
			agenttest.WaitFile(t, mark, "the command went on after its client went away")
			if _, err := os.Stat(mark + ".term"); err == nil {
				t.Error("a command without reap got TERM when its client went away")
			}
		})
	}
}

// A terminal: the command has a controlling terminal of the size asked for.
func TestAgentTTY(t *testing.T) {
	a := startHostAgent(t, 0)
	req := command("sh", "-c", "tty; stty size; echo $TERM")
	req.TTY, req.Rows, req.Cols = true, 40, 100
	r := a.exec(t, req, nil)
	lines := strings.Split(strings.ReplaceAll(r.stdout, "\r", ""), "\n")
	if r.err != nil || len(lines) < 3 || !strings.HasPrefix(lines[0], "/dev/pts/") || lines[1] != "40 100" || lines[2] != "xterm" {
		t.Errorf("output %q, err %v", r.stdout, r.err)
	}
}

// A socket in the agent directory that is not the agent's (a link, a plain file) is never
// dialled: sbx then uses the engine's exec.
func TestDialRefusesLinks(t *testing.T) {
	// A listening agent.sock elsewhere, which a followed link would reach.
	elsewhere := t.TempDir()
	h, err := ListenHandoff(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(false)
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(elsewhere, agentSocket), filepath.Join(dir, agentSocket)); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(context.Background(), dir); err == nil {
		t.Error("a link to a socket was dialled")
	}
	if err := os.Remove(filepath.Join(dir, agentSocket)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, agentSocket), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("a plain file: want an error saying it is not a socket, got %v", err)
	}
}

// With StrictStdin, input that stops early (the client gone, or K) is never taken for a
// complete stream: the command is terminated before it could see an end.
func TestAgentStrictStdinCutIsNotEOF(t *testing.T) {
	a := startHostAgent(t, 0)
	for _, how := range []string{"client gone", "abort"} {
		t.Run(how, func(t *testing.T) {
			eof := filepath.Join(t.TempDir(), "eof")
			script := `echo "$$ $(cut -d' ' -f22 /proc/$$/stat)"; head -c 16 >/dev/null; echo got; cat >/dev/null; touch "$0"`
			req := command("sh", "-c", script, eof)
			req.Strict = StrictStdin
			c := a.start(t, req)
			if _, err := c.Write([]byte("part of a stream")); err != nil {
				t.Fatal(err)
			}
			p := agenttest.Proc{Kind: "command"}
			if _, err := fmt.Sscanf(readUntil(t, c, "got\n"), "%d %s", &p.Pid, &p.Start); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Kill)
			if how == "abort" {
				c.Abort()
				if r := finish(t, c); r.code != 143 {
					t.Errorf("exit code %d, want 143 (TERM)", r.code)
				}
			}
			c.Close()
			agenttest.WaitGone(t, p, "the command went on after its stream was cut")
			if _, err := os.Stat(eof); err == nil {
				t.Fatal("the command saw an end of input after a cut stream")
			}
		})
	}
}

// With StrictExit (a command that owns its stdin, -i, and so cannot learn from it that sbx
// went away, even after its input ended) the agent terminates it when its client goes.
func TestAgentStrictExitClientGoneTerminates(t *testing.T) {
	a := startHostAgent(t, 0)
	term := filepath.Join(t.TempDir(), "term")
	req := command("sh", "-c", `trap 'touch "$0"; exit' TERM; cat >/dev/null; echo eof; while :; do sleep 0.1; done`, term)
	req.Strict = StrictExit
	c := a.start(t, req)
	if err := c.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	readUntil(t, c, "eof\n")
	c.Close()
	agenttest.WaitFile(t, term, "the command was not terminated when its client went away")
}

// Starting a sandbox: sbx makes agent.sock and handoff.sock, the agent connects to the
// second and takes the first's listener. A client that dials agent.sock before the agent
// runs waits in its backlog and is served by the agent, never taken for it; afterwards the
// directory holds the socket alone, and no command inherits the listener.
func TestAgentHandoff(t *testing.T) {
	a := newHostAgent(t)
	h := a.listen()
	early, err := Dial(context.Background(), a.dir)
	if err != nil {
		t.Fatalf("dialling agent.sock before the agent runs: %v", err)
	}
	defer early.Close()
	a.run(0)
	if err := h.Pass(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	h.Close(true)
	_ = early.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if typ, body, err := early.next(); err != nil || typ != FrameHello || string(body) != Version() {
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
	r := a.exec(t, command("sh", "-c", `for f in /proc/$$/fd/*; do readlink "$f"; done; echo end`), nil)
	if !strings.HasSuffix(r.stdout, "end\n") || strings.Contains(r.stdout, "socket:") {
		t.Errorf("a command's descriptors: %+v", r)
	}
}

// A sandbox started by something other than sbx (docker start) has nobody at handoff.sock,
// or only the socket a killed sbx left, which refuses: its agent says so and keeps the
// sandbox running, and nobody answers at agent.sock. The next start makes both sockets
// again over what was left.
func TestAgentWithoutHandoff(t *testing.T) {
	for _, left := range []string{"nothing", "a killed sbx's sockets"} {
		t.Run(left, func(t *testing.T) {
			a := newHostAgent(t)
			if left != "nothing" {
				// sbx killed after making the sockets: the kernel closes its descriptors, the
				// names stay.
				a.listen().Close(true)
				leaveSockets(t, a.dir)
			}
			a.run(0)
			waitLog(t, a, "no socket from sbx")
			if st := procState(t, a.cmd.Process.Pid); st == "Z" {
				t.Fatal("the agent exited without a socket; the sandbox would stop")
			}
			if c, err := Dial(context.Background(), a.dir); err == nil {
				c.Close()
				t.Error("agent.sock answered without an agent behind it")
			}
		})
	}
	// The next start is not blocked by what is left.
	a := startHostAgent(t, 0)
	if r := a.exec(t, command("echo", "ok"), nil); r.stdout != "ok\n" {
		t.Errorf("after a start over leftovers: %+v", r)
	}
}

// leaveSockets leaves agent.sock and handoff.sock in dir as a killed sbx would: socket files
// nobody listens on.
func leaveSockets(t *testing.T, dir string) {
	t.Helper()
	h, err := ListenHandoff(dir)
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
}

// Under gVisor the agent binds agent.sock itself (OwnSocket): over a socket a previous run
// left, answering every host user (0666, from its umask, which commands do not inherit), and
// with no hand-off; Await returns once it answers, and fails in time when nothing does.
func TestAgentOwnSocket(t *testing.T) {
	nobody := newHostAgent(t)
	start := time.Now()
	if err := Await(context.Background(), nobody.dir, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Errorf("awaiting a directory without an agent: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("awaiting nobody took %s", took)
	}

	a := newHostAgent(t)
	a.ownSocket = true
	// What a killed run left: a socket file nobody listens on.
	a.listen().Close(true)
	leaveSockets(t, a.dir)
	if err := os.Remove(filepath.Join(a.dir, handoffSocket)); err != nil {
		t.Fatal(err)
	}
	a.run(0)
	if err := Await(context.Background(), a.dir, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(a.dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != agentSocket {
		t.Errorf("the agent directory: %v %v", entries, err)
	}
	if fi, err := os.Lstat(filepath.Join(a.dir, agentSocket)); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o666 {
		t.Errorf("agent.sock: %v %v", fi, err)
	}
	umask := syscall.Umask(0o022)
	syscall.Umask(umask)
	r := a.exec(t, command("sh", "-c", "umask; echo ok"), nil)
	if r.stdout != fmt.Sprintf("%04o\nok\n", umask) || r.code != 0 {
		t.Errorf("a command through the agent's own socket: %+v", r)
	}
}

// cpuTime is the CPU time process pid has used.
func cpuTime(t *testing.T, pid int) time.Duration {
	f := procStat(t, pid)
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// An agent out of descriptors (EMFILE) leaves a connection waiting instead of spinning on a
// listener that stays readable, and takes it once a descriptor is free.
func TestAgentOutOfDescriptors(t *testing.T) {
	const nofile = 32
	a := startHostAgent(t, nofile)
	pid := a.cmd.Process.Pid
	// Filled once it has settled (served a command, started its next spare): until then what
	// its start used may still be closing, which would free a descriptor in the window.
	a.serves(t)
	a.spare(t)
	// The descriptors the agent holds: the runtime's, the listener, epoll, the signal
	// pipe, any it inherited, and one per connection.
	holds := func() int { return descriptors(t, pid, nofile) }
	var held []*Client
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	greet := func(c *Client) error {
		_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		typ, _, err := c.next()
		if err == nil && typ != FrameHello {
			err = fmt.Errorf("frame %q", typ)
		}
		return err
	}
	for holds() < nofile { // a greeted connection holds one more descriptor of the agent's
		c, err := Dial(context.Background(), a.dir)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if err := greet(c); err != nil {
			t.Fatalf("connection %d: %v", len(held), err)
		}
	}
	// The agent now fails to accept the next with EMFILE. Spinning would burn the CPU for
	// the whole window; a paused agent wakes once a second at most. A descriptor the agent
	// held for a moment when the count was taken (its spare's start, the command it served)
	// lets it greet one more: that one is held too and the next waits.
	var waiting *Client
	for attempt := 0; waiting == nil; attempt++ {
		c, err := Dial(context.Background(), a.dir)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		before := cpuTime(t, pid)
		time.Sleep(2 * time.Second)
		used := cpuTime(t, pid) - before
		_ = c.conn.SetReadDeadline(time.Unix(1, 0)) // what has arrived, without waiting
		if n, _ := c.conn.Read(make([]byte, 1)); n > 0 {
			if attempt == 3 {
				t.Fatalf("the agent greeted %d connections beyond the %d descriptors it held", attempt+1, nofile)
			}
			continue
		}
		t.Logf("CPU used in 2s out of descriptors: %s", used)
		if used > 200*time.Millisecond {
			t.Errorf("the agent used %s of CPU in 2s while out of descriptors: it spins", used)
		}
		waiting = c
	}
	held[0].Close()
	if err := greet(waiting); err != nil {
		t.Fatalf("the waiting connection once a descriptor was free: %v", err)
	}
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

// timed is command with a timeout and grace period short enough for a test.
func timed(timeout, grace time.Duration, argv ...string) Request {
	req := command(argv...)
	req.Timeout, req.Grace = timeout, grace
	return req
}

// At its timeout the agent sends T and TERM to the command, then KILL after the grace period
// to what ignored the TERM, and reports how the command ended. P names the command.
func TestAgentTimeout(t *testing.T) {
	a := startHostAgent(t, 0)
	for _, tt := range []struct {
		name, script string
		code         int
	}{
		{"TERM", `trap 'echo term; exit 3' TERM; echo $$ ready; while :; do sleep 0.05; done`, 3},
		{"KILL", `trap '' TERM; echo $$ ready; while :; do sleep 0.05; done`, 137},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := a.start(t, timed(300*time.Millisecond, 300*time.Millisecond, "sh", "-c", tt.script))
			out := readUntil(t, c, "ready\n")
			p := c.Started()
			cmd := agenttest.ProcOf(t, "command", p.Pid)
			if out != fmt.Sprintf("%d ready\n", p.Pid) || strconv.Itoa(p.Start) != cmd.Start || p.Agent != a.cmd.Process.Pid {
				t.Errorf("P %+v, the command says %q, started at %s, the agent is %d", p, out, cmd.Start, a.cmd.Process.Pid)
			}
			r := finish(t, c)
			if r.err != nil || r.code != tt.code || !c.TimedOut() {
				t.Errorf("want exit %d and T: %+v, T %v", tt.code, r, c.TimedOut())
			}
		})
	}
}

// What a command leaves at its timeout is ended with it, however it got away from its
// group: in its group ignoring TERM, in a group of its own, in a session of its own after a
// double fork (which brings it back to the command, a subreaper). Each held the command's
// output open; the agent still reports.
func TestAgentTimeoutEndsEscapees(t *testing.T) {
	python3 := agenttest.Python3(t)
	a := startHostAgent(t, 0)
	dir := t.TempDir()
	c := a.start(t, timed(500*time.Millisecond, 500*time.Millisecond, python3, "-c", escapees, dir, "0"))
	readUntil(t, c, "ready\n")
	ps := agenttest.Noted(t, dir, "main", "group", "pgrp", "daemon")
	r := finish(t, c)
	if r.err != nil || r.code != 137 || !c.TimedOut() {
		t.Errorf("want exit 137 and T: %+v, T %v", r, c.TimedOut())
	}
	for _, p := range ps {
		agenttest.WaitGone(t, p, fmt.Sprintf("the %s process (%d) outlived the command's timeout", p.Kind, p.Pid))
	}
}

// When a command exits, what is left in its group and session is ended; what left both and
// was orphaned can no longer be told from anyone else's, so it stays, and the agent reports
// the exit once the rest is gone, even while it holds the command's output open.
func TestAgentExitEndsGroupNotDaemons(t *testing.T) {
	python3 := agenttest.Python3(t)
	a := startHostAgent(t, 0)
	dir := t.TempDir()
	c := a.start(t, timed(0, 300*time.Millisecond, python3, "-c", escapees, dir, "1"))
	readUntil(t, c, "ready\n")
	ps := agenttest.Noted(t, dir, "main", "group", "pgrp", "daemon")
	r := finish(t, c)
	if r.err != nil || r.code != 0 || c.TimedOut() {
		t.Errorf("want exit 0 without T: %+v, T %v", r, c.TimedOut())
	}
	for _, p := range ps {
		if p.Kind == "daemon" {
			if !p.Alive() {
				t.Error("the daemon was ended: the README says it is not")
			}
			continue
		}
		agenttest.WaitGone(t, p, fmt.Sprintf("the %s process (%d) outlived the command", p.Kind, p.Pid))
	}
}

// A command without reap (a shell session's launcher, which outlives its exec on purpose) is
// no subreaper: what it orphans is not its to end, and holding its output open does not
// keep the agent from reporting its timeout.
func TestAgentNoReapTimeoutReports(t *testing.T) {
	a := startHostAgent(t, 0)
	dir := t.TempDir()
	script := `setsid -f sh -c 'echo "$$ $(cut -d" " -f22 /proc/$$/stat)" >"$1/d.tmp"; mv "$1/d.tmp" "$1/daemon"; exec sleep 1000' sh "$0"
while [ ! -e "$0/daemon" ]; do sleep 0.01; done; trap '' TERM; echo ready; while :; do sleep 0.05; done`
	req := timed(300*time.Millisecond, 300*time.Millisecond, "sh", "-c", script, dir)
	req.Reap = false
	c := a.start(t, req)
	readUntil(t, c, "ready\n")
	d := agenttest.Noted(t, dir, "daemon")[0]
	r := finish(t, c)
	if r.err != nil || r.code != 137 || !c.TimedOut() {
		t.Errorf("want exit 137 and T: %+v, T %v", r, c.TimedOut())
	}
	if !d.Alive() {
		t.Error("a process a launcher orphaned was ended with it")
	}
}

// Ending a command at its timeout never touches another command's processes.
func TestAgentTimeoutSparesOthers(t *testing.T) {
	a := startHostAgent(t, 0)
	other := a.start(t, command("sh", "-c", `echo "$$ $(cut -d" " -f22 /proc/$$/stat) ready"; exec sleep 1000`))
	p := agenttest.Proc{Kind: "other"}
	if _, err := fmt.Sscanf(readUntil(t, other, "ready\n"), "%d %s", &p.Pid, &p.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	c := a.start(t, timed(300*time.Millisecond, 300*time.Millisecond, "sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`))
	readUntil(t, c, "ready\n")
	if r := finish(t, c); r.code != 137 || !c.TimedOut() {
		t.Errorf("want exit 137 and T: %+v", r)
	}
	if !p.Alive() {
		t.Fatal("another command's process was ended with the one that timed out")
	}
	other.Close()
	agenttest.WaitGone(t, p, "the other command went on after its client went away")
}

// descriptors counts the descriptors process pid holds below limit, its RLIMIT_NOFILE: the
// ones above, inherited before the limit was lowered, cannot change.
func descriptors(t *testing.T, pid, limit int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if i, err := strconv.Atoi(fd.Name()); err == nil && i < limit {
			n++
		}
	}
	return n
}

// A command that cannot start for want of descriptors fails with F, and what the agent
// opened for it is closed again, whichever of its stdio's descriptors (three pipes, or a
// terminal and its copy) was the first it could not get. (It starts on the spare shim,
// which needs none: with a terminal, three free are enough.)
func TestAgentSpawnFailureLeaksNothing(t *testing.T) {
	const nofile = 32
	for _, tty := range []bool{false, true} {
		most := 4
		if tty {
			most = 2
		}
		for free := 1; free <= most; free++ {
			t.Run(fmt.Sprintf("tty %v, %d free", tty, free), func(t *testing.T) {
				a := startHostAgent(t, nofile)
				pid := a.cmd.Process.Pid
				// Counted once it has served a command (until then it may still hold what its
				// start used: the hand-off connection) and started its next spare.
				a.serves(t)
				a.spare(t)
				base := descriptors(t, pid, nofile)
				var conns []*Client // each greeted connection holds one
				for descriptors(t, pid, nofile) < nofile-free {
					conns = append(conns, a.dial(t))
				}
				req := command("true")
				req.TTY = tty
				c := conns[len(conns)-1]
				if err := c.Start(req.Encode(), false); err != nil {
					t.Fatal(err)
				}
				r := finish(t, c)
				var se *SpawnError
				if !errors.As(r.err, &se) || se.Errno != syscall.EMFILE {
					t.Fatalf("want F with EMFILE, got %+v", r)
				}
				for _, c := range conns {
					c.Close()
				}
				for i := 0; descriptors(t, pid, nofile) > base; i++ {
					if i == 600 {
						t.Fatalf("the agent holds %d descriptors, %d before the command", descriptors(t, pid, nofile), base)
					}
					time.Sleep(50 * time.Millisecond)
				}
				a.serves(t)
			})
		}
	}
}

// A command starts on the spare shim the agent started ahead (its pid is the spare's), and
// the agent starts the next spare once nothing else waits.
func TestAgentCommandStartsOnTheSpare(t *testing.T) {
	a := startHostAgent(t, 0)
	for range 3 {
		spare := a.spare(t)
		r := a.exec(t, command("sh", "-c", "echo $$"), nil)
		if r.err != nil || r.stdout != strconv.Itoa(spare)+"\n" {
			t.Fatalf("the command ran as %q (%v), the spare was %d", r.stdout, r.err, spare)
		}
	}
}

// A spare that something in the sandbox ended is reaped and replaced, and commands start.
func TestAgentSpareKilled(t *testing.T) {
	a := startHostAgent(t, 0)
	spare := a.spare(t)
	if err := syscall.Kill(spare, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Reaped: the deadline only fails an agent that leaves it a zombie.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", spare)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed spare %d was never reaped (state %s)", spare, procState(t, spare))
		}
	}
	if r := a.exec(t, command("echo", "ok"), nil); r.err != nil || r.stdout != "ok\n" {
		t.Fatalf("a command after the spare was killed: %+v (%v)", r, r.err)
	}
	if next := a.spare(t); next == spare {
		t.Fatalf("no new spare: %d", next)
	}
}

// A command line too long for a spare's request starts its shim the usual way, and the
// spare waits for the next command.
func TestAgentLongCommandStartsItsOwnShim(t *testing.T) {
	a := startHostAgent(t, 0)
	spare := a.spare(t)
	long := strings.Repeat("x", shim.MaxRequest)
	// The shim's marker reaches the shim, not the command, even one given that variable.
	cmd := command("sh", "-c", `echo $$ ${#1} "${`+shim.MarkerName+`-unset}"`, "sh", long)
	cmd.Env = append(cmd.Env, shim.MarkerName+"=mine")
	r := a.exec(t, cmd, nil)
	if want := fmt.Sprintf(" %d unset\n", len(long)); r.err != nil || !strings.HasSuffix(r.stdout, want) || r.stdout == strconv.Itoa(spare)+want {
		t.Fatalf("the long command printed %q (%v), the spare is %d", r.stdout, r.err, spare)
	}
	if r := a.exec(t, command("sh", "-c", "echo $$"), nil); r.stdout != strconv.Itoa(spare)+"\n" {
		t.Fatalf("the next command ran as %q, not on the spare %d", r.stdout, spare)
	}
}

// The agent names a command's process (P) before the command runs, on the spare shim and on
// a shim of its own: a command whose first act stops the agent still leaves sbx its pid, to
// end it at its timeout (sandbox's backstop). The read deadline only fails an agent that
// never sends P.
func TestAgentNamesTheProcessBeforeItRuns(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("own shim %v", own), func(t *testing.T) {
			a := startHostAgent(t, 0)
			a.spare(t)
			stopped := filepath.Join(t.TempDir(), "stopped")
			cmd := command("sh", "-c", `kill -STOP $PPID; echo >"$1"; sleep 60`, "sh", stopped)
			if own {
				cmd.Argv = append(cmd.Argv, strings.Repeat("x", shim.MaxRequest))
			}
			c := a.start(t, cmd)
			agenttest.WaitFile(t, stopped, "the command's mark")
			if st := procState(t, a.cmd.Process.Pid); st != "T" {
				t.Fatalf("the command did not stop the agent: state %q", st)
			}
			_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			typ, body, err := c.next()
			_ = c.conn.SetReadDeadline(time.Time{})
			var p Process
			if n, _ := fmt.Sscanf(string(body), "%d %d %d", &p.Pid, &p.Start, &p.Agent); err != nil || typ != FrameProcess || n != 3 {
				t.Fatalf("with the agent stopped, the first frame: %q %q (%v)", typ, body, err)
			}
			if agenttest.ProcOf(t, "command", p.Pid).Start != strconv.Itoa(p.Start) || p.Agent != a.cmd.Process.Pid {
				t.Fatalf("P %+v does not name the command and the agent %d", p, a.cmd.Process.Pid)
			}
			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			c.Abort()
			if r := finish(t, c); r.err != nil || r.code != 128+int(syscall.SIGTERM) {
				t.Errorf("after CONT and K: %+v", r)
			}
		})
	}
}

// The shim execs its command only once the agent says shim.Go on its report socket, and
// drops it when the agent closes the socket instead.
func TestShimExecsOnlyAfterGo(t *testing.T) {
	for _, say := range []bool{false, true} {
		t.Run(fmt.Sprintf("go %v", say), func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			ours, theirs := os.NewFile(uintptr(pair[0]), "agent"), os.NewFile(uintptr(pair[1]), "shim")
			defer ours.Close()
			cmd := exec.Command(agenttest.Binary(t), shim.Mode, "0", "--", "sh", "-c", `echo ran >"$1"`, "sh", marker)
			cmd.Env, cmd.ExtraFiles = []string{shim.Marker, "PATH=/usr/bin:/bin"}, []*os.File{theirs}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			theirs.Close()
			buf := make([]byte, 64)
			if n, err := ours.Read(buf); err != nil || string(buf[:n]) != shim.Ready {
				t.Fatalf("the shim said %q (%v)", buf[:n], err)
			}
			if say {
				_, err = ours.Write([]byte(shim.Go))
			} else {
				err = ours.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			werr := cmd.Wait()
			_, serr := os.Stat(marker)
			switch {
			case say && (werr != nil || serr != nil):
				t.Errorf("after Go: exit %v, the command's file: %v", werr, serr)
			case !say && (cmd.ProcessState.ExitCode() != 127 || serr == nil):
				t.Errorf("without Go: exit %v, the command ran: %v", werr, serr == nil)
			}
		})
	}
}
