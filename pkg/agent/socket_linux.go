package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Dial connects to the agent whose socket is in dir; Hello then checks who answers. The
// directory is mounted read-only in sandboxes made by this sbx, but one made by an older sbx
// could write there, so the socket is opened without following links and checked to be a
// socket, then reached through /proc/self/fd: a link planted there can never point sbx
// elsewhere, and the path's length does not matter.
func Dial(ctx context.Context, dir string) (*Client, error) {
	conn, err := dial(ctx, dir, nil)
	if err != nil {
		return nil, err
	}
	return newClient(conn), nil
}

// dial connects to dir's agent.sock; with want, only when the socket is that one.
func dial(ctx context.Context, dir string, want *SocketID) (net.Conn, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, agentSocket, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s/%s is not a socket", dir, agentSocket)
	}
	if want != nil && socketID(&st) != *want {
		return nil, errOtherSocket
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// Handoff is the pair of sockets sbx makes in a sandbox's agent directory before it starts
// the sandbox: agent.sock, whose listener the agent takes, and handoff.sock, where the agent
// comes to take it. A client that dials agent.sock meanwhile waits in its backlog, and is
// never taken for the agent.
type Handoff struct {
	dfd int // the directory: every name is bound and removed relative to it
	lfd int // agent.sock's listener
	ho  *net.UnixListener
}

// ListenHandoff binds both sockets in dir, replacing what a previous run left. agent.sock is
// for sbx alone (0600); handoff.sock must let the sandbox user in, whatever its uid (0666);
// the private directory above keeps other host users away from both.
func ListenHandoff(dir string) (_ *Handoff, err error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	h := &Handoff{dfd: dfd, lfd: -1}
	defer func() {
		if err != nil {
			h.Close(false)
		}
	}()
	if h.lfd, err = bindAt(dfd, agentSocket, 0o600, 128); err != nil {
		return nil, err
	}
	hfd, err := bindAt(dfd, handoffSocket, 0o666, 1)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(hfd), handoffSocket)
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	h.ho = ln.(*net.UnixListener)
	h.ho.SetUnlinkOnClose(false) // its name is relative to dfd: close removes it
	return h, nil
}

// bindAt makes a listening Unix socket named name in the directory dfd. The name is reached
// through /proc/self/fd, which keeps the address short whatever the state directory's path.
func bindAt(dfd int, name string, mode uint32, backlog int) (int, error) {
	if err := unix.Unlinkat(dfd, name, 0); err != nil && err != unix.ENOENT {
		return -1, fmt.Errorf("removing the old %s: %w", name, err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", dfd, name)})
	if err == nil {
		err = unix.Fchmodat(dfd, name, mode, 0)
	}
	if err == nil {
		err = unix.Listen(fd, backlog)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("making %s: %w", name, err)
	}
	return fd, nil
}

// Pass waits up to wait for the agent to connect to handoff.sock and sends it agent.sock's
// listener: the frame L with the descriptor attached.
func (h *Handoff) Pass(ctx context.Context, wait time.Duration) error {
	_ = h.ho.SetDeadline(time.Now().Add(wait))
	stop := context.AfterFunc(ctx, func() { _ = h.ho.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c, err := h.ho.AcceptUnix()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("it did not connect within %s (%w)", wait, err)
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(wait))
	frame := []byte{byte(FrameListener), 0, 0, 0, 0}
	if _, _, err := c.WriteMsgUnix(frame, unix.UnixRights(h.lfd), nil); err != nil {
		return fmt.Errorf("sending it the socket: %w", err)
	}
	return nil
}

// Close releases sbx's side and removes handoff.sock; with passed false (the agent did not
// take the listener) agent.sock goes too, so a client finds no socket rather than one that
// nobody answers.
func (h *Handoff) Close(passed bool) {
	if h.ho != nil {
		h.ho.Close()
	}
	_ = unix.Unlinkat(h.dfd, handoffSocket, 0)
	if !passed {
		_ = unix.Unlinkat(h.dfd, agentSocket, 0)
	}
	if h.lfd >= 0 {
		unix.Close(h.lfd)
	}
	unix.Close(h.dfd)
}

// StatSocket names the agent.sock in dir, without following a link.
func StatSocket(dir string) (SocketID, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, dir+"/"+agentSocket, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return SocketID{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return SocketID{}, fmt.Errorf("%s/%s is not a socket", dir, agentSocket)
	}
	return socketID(&st), nil
}

func socketID(st *unix.Stat_t) SocketID {
	return SocketID{Dev: st.Dev, Ino: st.Ino, Ctime: st.Ctim.Nano()}
}
