package sandbox

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// dialAgentSocket connects to dir/agent.sock. The directory is writable from inside the
// sandbox, so the socket is opened without following links and checked to be a socket, then
// reached through /proc/self/fd: a link planted there can never point sbx elsewhere, and the
// path's length does not matter.
func dialAgentSocket(ctx context.Context, dir string) (net.Conn, error) {
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
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}
