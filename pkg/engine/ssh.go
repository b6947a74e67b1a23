package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// The docker CLI reaches an ssh:// engine by running the system ssh, so the user's
// ~/.ssh/config, known_hosts and agent apply, with "docker system dial-stdio" on the remote
// side, which joins ssh's stdin and stdout to the remote engine's socket. sbx does the same.
// docker/cli's connhelper would do it too, but the Go proxy serves only docker/cli v29, which
// needs the moby/moby split modules rather than the docker/docker client sbx uses; the piece
// is small, so it lives here.

// sshConnectTimeout bounds the first contact with an ssh:// engine: a handshake plus a
// remote process, slower than a socket.
const sshConnectTimeout = 30 * time.Second

// sshStderrLimit is how much of ssh's stderr a connection keeps to explain a failure; the
// rest is read and dropped so ssh never blocks on it.
const sshStderrLimit = 8 << 10

// sshTarget is where an ssh:// endpoint points: ssh://[user@]host[:port].
type sshTarget struct {
	User, Host, Port string
}

func parseSSH(raw string) (sshTarget, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return sshTarget{}, err
	}
	if _, set := u.User.Password(); set {
		return sshTarget{}, errors.New("an ssh endpoint takes no password; use your ssh agent or key")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return sshTarget{}, errors.New("an ssh endpoint is ssh://[user@]host[:port], without a path or query")
	}
	t := sshTarget{User: u.User.Username(), Host: u.Hostname(), Port: u.Port()}
	// ssh reads a leading "-" as an option wherever it stands.
	if t.Host == "" || strings.HasPrefix(t.Host, "-") || strings.HasPrefix(t.User, "-") {
		return sshTarget{}, errors.New("an ssh endpoint needs a host name that does not start with \"-\"")
	}
	return t, nil
}

// args are ssh's arguments to run command on t, as the docker CLI gives them.
func (t sshTarget) args(command ...string) []string {
	args := []string{"-o", fmt.Sprintf("ConnectTimeout=%d", int(sshConnectTimeout/time.Second)), "-T"}
	if t.User != "" {
		args = append(args, "-l", t.User)
	}
	if t.Port != "" {
		args = append(args, "-p", t.Port)
	}
	return append(append(args, "--", t.Host), command...)
}

// login is how the user would reach t by hand, for hints.
func (t sshTarget) login() string {
	s := "ssh "
	if t.Port != "" {
		s += "-p " + t.Port + " "
	}
	if t.User != "" {
		s += t.User + "@"
	}
	return s + t.Host
}

// sshDialer opens one ssh process per connection and remembers why the last one failed.
type sshDialer struct {
	target sshTarget
	mu     sync.Mutex
	failed error
	// spare is an ssh process started ahead of need: an exec takes a second connection
	// (its stream) after the first, and an ssh handshake is most of what either costs.
	spare *sshConn
}

// failure is the explained failure of the last ssh process that ended badly, if any.
func (d *sshDialer) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

func (d *sshDialer) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	d.mu.Lock()
	spare := d.spare
	d.spare = nil
	d.mu.Unlock()
	go d.refill()
	if spare != nil {
		select {
		case <-spare.done: // ended meanwhile (a dropped link): not worth handing out
			_ = spare.Close()
		default:
			return spare, nil
		}
	}
	c, err := d.start()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// refill starts a spare connection when there is none.
func (d *sshDialer) refill() {
	c, err := d.start()
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.spare != nil {
		_ = c.Close()
		return
	}
	d.spare = c
}

// start runs one ssh process joined to the remote engine.
func (d *sshDialer) start() (*sshConn, error) {
	// Not CommandContext: the connection outlives the dial's context.
	cmd := exec.Command("ssh", d.target.args("docker", "system", "dial-stdio")...)
	cmd.SysProcAttr = sshProcAttr()
	stderr := &headWriter{limit: sshStderrLimit}
	cmd.Stderr = stderr
	// Pipes of our own, not cmd's: Wait closes those as ssh exits, which would drop what
	// ssh wrote last and we have not read yet.
	stdinR, stdin, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdin.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = stdinR, stdoutW
	err = cmd.Start()
	stdinR.Close()
	stdoutW.Close()
	if err != nil {
		stdin.Close()
		stdout.Close()
		return nil, errs.Failure(fmt.Errorf("running ssh: %w", err), "install the OpenSSH client (ssh) to reach an ssh:// engine")
	}
	c := &sshConn{d: d, cmd: cmd, stdin: stdin, stdout: stdout, stderr: stderr, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// sshConn is a connection to the remote engine through ssh's stdin and stdout.
type sshConn struct {
	d       *sshDialer
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdout  io.ReadCloser
	stderr  *headWriter
	done    chan struct{}
	waitErr error
	once    sync.Once
}

func (c *sshConn) Read(p []byte) (int, error) {
	n, err := c.stdout.Read(p)
	if err == io.EOF {
		// ssh closes its stdout as it exits; its status says whether that was the end or a failure.
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			return n, err
		}
		if c.waitErr != nil {
			failure := c.explain()
			c.d.mu.Lock()
			c.d.failed = failure
			c.d.mu.Unlock()
			return n, failure
		}
	}
	return n, err
}

func (c *sshConn) Write(p []byte) (int, error) { return c.stdin.Write(p) }

// CloseWrite ends the remote side's input, as a socket's half-close does: an exec's stdin
// reaching its end relies on it.
func (c *sshConn) CloseWrite() error { return c.stdin.Close() }

func (c *sshConn) Close() error {
	c.once.Do(func() {
		_ = c.stdin.Close()
		_ = c.cmd.Process.Kill()
		<-c.done
		_ = c.stdout.Close()
	})
	return nil
}

func (c *sshConn) LocalAddr() net.Addr              { return sshAddr{} }
func (c *sshConn) RemoteAddr() net.Addr             { return sshAddr{} }
func (c *sshConn) SetDeadline(time.Time) error      { return nil }
func (c *sshConn) SetReadDeadline(time.Time) error  { return nil }
func (c *sshConn) SetWriteDeadline(time.Time) error { return nil }

type sshAddr struct{}

func (sshAddr) Network() string { return "ssh" }
func (sshAddr) String() string  { return "ssh" }

// explain turns ssh's exit and stderr into an error that says what failed and what to do.
func (c *sshConn) explain() error {
	code := -1
	var exitErr *exec.ExitError
	if errors.As(c.waitErr, &exitErr) {
		code = exitErr.ExitCode()
	}
	return sshFailure(c.d.target, code, c.stderr.String())
}

func sshFailure(t sshTarget, code int, stderr string) error {
	last := ""
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "@@@") {
			last = line
		}
	}
	last = termtext.Ellipsis(termtext.Clean(last), 300)
	where := t.Host
	if t.Port != "" {
		where = net.JoinHostPort(t.Host, t.Port)
	}
	switch {
	case strings.Contains(stderr, "REMOTE HOST IDENTIFICATION HAS CHANGED"):
		return errs.Failure(fmt.Errorf("ssh to %s: the host's key does not match the one in known_hosts, so ssh refused it (possibly an attack)", where),
			fmt.Sprintf("if the host's key changed for a reason you know, remove the old one (ssh-keygen -R %s) and check the new one with %s", t.Host, t.login()))
	case strings.Contains(stderr, "Host key verification failed"):
		return errs.Failure(fmt.Errorf("ssh to %s: the host's key is not one known_hosts accepts", where),
			fmt.Sprintf("connect once with %s to check and accept the host's key", t.login()))
	case strings.Contains(stderr, "Permission denied ("), strings.Contains(stderr, "Too many authentication failures"):
		return errs.Failure(fmt.Errorf("ssh to %s: authentication failed: %s", where, last),
			fmt.Sprintf("check that %s logs in without a prompt: add your key to the agent (ssh-add) or name it with IdentityFile in ~/.ssh/config", t.login()))
	case code == 127 || strings.Contains(stderr, "docker: not found") || strings.Contains(stderr, "docker: command not found"):
		return errs.Failure(fmt.Errorf("ssh to %s: the remote host has no docker command: %s", where, last),
			fmt.Sprintf("install the docker CLI on %s, on the PATH of non-interactive ssh sessions (%s docker version must work)", t.Host, t.login()))
	case strings.Contains(stderr, "dial-stdio") && strings.Contains(stderr, "unknown"):
		return errs.Failure(fmt.Errorf("ssh to %s: the remote docker CLI is too old for dial-stdio: %s", where, last),
			fmt.Sprintf("upgrade docker on %s to 18.09 or later", t.Host))
	case code == 255:
		return errs.Failure(fmt.Errorf("ssh to %s failed: %s", where, last),
			fmt.Sprintf("check that %s works", t.login()))
	}
	return errs.Failure(fmt.Errorf("ssh to %s: docker system dial-stdio failed (exit %d): %s", where, code, last),
		fmt.Sprintf("check that %s docker version reaches the engine there", t.login()))
}

// headWriter keeps the first limit bytes written to it and drops the rest.
type headWriter struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func (w *headWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.limit - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (w *headWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
