# sbx's in-sandbox agent: the main process of sandboxes on bundled images. It accepts
# connections on a Unix socket that sbx made on the host and handed over, and runs each
# request as a child process whose stdio it relays over the connection, so a command starts
# without the engine's exec path (containerd-shim plus runc exec, ~100 ms). It runs as the
# sandbox user under the sandbox's limits, so its children are confined exactly as an exec
# would be. It has one thread and forks only to run a request: a fork bomb that fills the
# pids limit cannot stall it. It imports only modules written in C, which keeps its start (a
# sandbox's first command waits for it) near the interpreter's own.
#
# The socket's directory (DIR) is mounted read-only, so nothing in the sandbox can store a
# byte there, the agent included: sbx binds the listening socket agent.sock on the host
# before it starts the sandbox, and passes it over handoff.sock, the one socket the agent
# connects to (connecting needs no write access to the mount). sbx sends the frame L with
# the listener attached (SCM_RIGHTS); without it (a sandbox started by something other than
# sbx, or an sbx that gave up), the agent only keeps the sandbox running and reaps orphans,
# and sbx uses the engine's exec.
#
# Frames both ways: 1 byte type, 4 bytes big-endian length, payload of at most MAX_FRAME.
#   agent -> client: H hello (version), 1 stdout, 2 stderr, F spawn failure ("errno\0text"),
#                    Z exit code, X the agent gives up on the connection (text), then closes
#   client -> agent: R request, I stdin, E stdin EOF, W "rows cols", K abort: terminate the
#                    command's process group
# A frame of another type, a longer one, a second R or a malformed R or W is refused with X,
# and the connection is dropped as if the client had gone away.
# A request is NUL-terminated fields: tty, rows, cols, strict, cwd, argc, argv..., env...
# A client that goes away closes the command's stdin (or hangs up its terminal); sbx's exec
# wrapper takes that as the signal to end the command. With strict 1, a client that goes
# away before E terminates the command's process group first, so a cut stream is never
# taken for a complete one; with strict 2 (a command that owns its stdin, so the wrapper
# cannot see the client go), a client that goes away before the exit does.
import os, sys, errno, select, fcntl, termios, _signal, _socket

VERSION, DIR = sys.argv[1], sys.argv[2]
CHUNK = 256 << 10
HIGH = 4 << 20
MAX_FRAME = 8 << 20  # a request holds argv and environment: the kernel takes at most 6 MiB
CLIENT_FRAMES = b"RIEWK"
HANDOFF_WAIT = 30  # seconds; sbx sends the listener as soon as it accepts
F_SETPIPE_SZ = 1031
IN, OUT = select.EPOLLIN, select.EPOLLOUT
ep = select.epoll()
handlers = {}  # fd -> callable(events)
children = {}  # pid -> Conn
base_env = dict(os.environb)


def watch(fd, events, fn):
    if fd in handlers:
        ep.modify(fd, events)
    else:
        ep.register(fd, events)
    handlers[fd] = fn


def unwatch(fd):
    if handlers.pop(fd, None) is not None:
        ep.unregister(fd)


def frame(t, data=b""):
    return t + len(data).to_bytes(4, "big") + data


def winsize(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, rows.to_bytes(2, sys.byteorder) + cols.to_bytes(2, sys.byteorder) + bytes(4))


def start(argv, env, cwd, fds, tty):
    """fork and exec argv with fds as its stdio in a new session; returns its pid."""
    r, w = os.pipe()  # closed by exec: an empty read means the exec worked
    try:
        pid = os.fork()  # EAGAIN when the pids limit is full
    except OSError:
        os.close(r)
        os.close(w)
        raise
    if pid == 0:
        try:
            os.setsid()
            if tty:
                fcntl.ioctl(fds[0], termios.TIOCSCTTY, 0)
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
            _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
            if cwd:
                os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except OSError as e:
            os.write(w, b"%d\0%s" % (e.errno or 0, (e.strerror or str(e)).encode()))
        except BaseException as e:
            os.write(w, b"0\0%s" % str(e).encode())
        os._exit(127)
    os.close(w)
    err = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        err += b
    os.close(r)
    if err:
        os.waitpid(pid, 0)
        raise SpawnError(err)
    return pid


class SpawnError(Exception):
    pass


class ProtocolError(Exception):
    """A frame the agent does not take: the connection is refused with its text."""


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.fd = sock.fileno()
        self.events = 0
        self.inbuf = bytearray()
        self.out = bytearray()
        self.gone = False
        self.pid = None
        self.status = None
        self.outputs = {}  # output fd -> stream byte, while open
        self.paused = False
        self.master = None  # the terminal's master side in TTY mode
        self.stdin = None
        self.stdin_buf = bytearray()
        self.stdin_eof = False
        self.strict = b"0"
        self.send(frame(b"H", VERSION.encode()))

    def send(self, data):
        if not self.gone:
            self.out += data
            self.update()

    def update(self):
        if self.gone:
            return
        ev = IN if len(self.stdin_buf) < HIGH else 0
        if self.out:
            ev |= OUT
        if ev != self.events:
            if ev:
                watch(self.fd, ev, self.on_sock)
            else:
                unwatch(self.fd)
            self.events = ev
        self.pause(len(self.out) > HIGH)

    def pause(self, on):
        """Stop reading the command's output while the client is behind."""
        if on != self.paused:
            self.paused = on
            for fd in self.outputs:
                if on:
                    unwatch(fd)
                else:
                    watch(fd, IN, self.output_handler(fd))

    def output_handler(self, fd):
        def handler(ev):
            self.on_output(fd)
        handler.conn = self
        return handler

    def on_sock(self, ev):
        if ev & OUT:
            try:
                del self.out[:self.sock.send(self.out)]
            except BlockingIOError:
                pass
            except OSError:
                return self.drop()
            if not self.out and self.done():
                return self.close()
        if ev & (IN | select.EPOLLHUP | select.EPOLLERR):
            try:
                data = self.sock.recv(CHUNK)
            except BlockingIOError:
                data = None
            except OSError:
                data = b""
            if data == b"":
                return self.drop()
            if data:
                self.inbuf += data
                self.frames()
        self.update()

    def frames(self):
        while len(self.inbuf) >= 5 and not self.gone:
            t, n = self.inbuf[0:1], int.from_bytes(self.inbuf[1:5], "big")
            if t not in CLIENT_FRAMES:
                raise ProtocolError("unknown frame type %r" % bytes(t))
            if n > MAX_FRAME:
                raise ProtocolError("frame %r of %d bytes, more than %d" % (bytes(t), n, MAX_FRAME))
            if len(self.inbuf) < 5 + n:
                return
            if t == b"I":  # the bulk of a copy: straight to the pipe when nothing waits
                if not self.stdin_eof:
                    with memoryview(self.inbuf) as mv:
                        data, done = mv[5:5 + n], 0
                        if not self.stdin_buf and self.stdin is not None:
                            try:
                                done = os.write(self.stdin, data)
                            except BlockingIOError:
                                pass
                            except OSError:  # the command closed its stdin
                                done = n
                        self.stdin_buf += data[done:]
                        del data
                del self.inbuf[:5 + n]
                self.feed()
                continue
            data = bytes(self.inbuf[5:5 + n])
            del self.inbuf[:5 + n]
            if t == b"R":
                if self.pid is not None:
                    raise ProtocolError("a second request on one connection")
                self.spawn(data.split(b"\0"))
            elif t == b"E":
                self.stdin_eof = True
                self.feed()
            elif t == b"K":
                self.abort()
            elif t == b"W":
                rows, cols = data.split()
                if self.master is not None:
                    winsize(self.master, int(rows), int(cols))

    def abort(self):
        # TERM before the input ends: the command dies, or cleans up and exits, without
        # ever reading an end of input; sbx's watchdog KILLs what remains of the group.
        if self.pid and self.status is None:
            try:
                os.killpg(self.pid, _signal.SIGTERM)
            except OSError:
                pass
        self.end_input()

    def end_input(self):
        """Close the command's stdin now, dropping what was not written yet."""
        self.stdin_buf.clear()
        self.stdin_eof = True
        if self.stdin is not None:
            unwatch(self.stdin)
            close_fd(self.stdin)  # a terminal's copy only: it has no EOF to pass on
            self.stdin = None
        self.update()

    def drop(self):
        """The client went away: end the command's input, keep draining its output."""
        if self.strict == b"2" and self.status is None or self.strict == b"1" and not self.stdin_eof:
            self.abort()
        self.close()
        self.out.clear()
        self.end_input()
        self.pause(False)
        if self.master is not None:  # hang up the terminal
            self.end_output(self.master)

    def fail(self, why, fd=None):
        """Give up on the connection (a frame refused, or a bug in a handler of fd): tell the
        client why if its socket takes it at once, then drop it as a client that went away."""
        if not self.gone:
            self.out += frame(b"X", why.encode("utf-8", "replace")[:4096])
            try:
                self.sock.send(self.out)
            except OSError:
                pass
        if fd in self.outputs:  # its handler failed: never read it again
            self.end_output(fd)
        self.drop()

    def close(self):
        if not self.gone:
            unwatch(self.fd)
            self.events = 0
            self.gone = True
            self.sock.close()
            listen(True)  # a descriptor is free again

    def spawn(self, f):
        try:
            tty, rows, cols, self.strict, cwd = f[0] == b"1", int(f[1]), int(f[2]), f[3], f[4]
            argc = int(f[5])
        except (IndexError, ValueError):
            raise ProtocolError("malformed request") from None
        argv, envs = f[6:6 + argc], f[6 + argc:-1]
        if not argv or len(argv) != argc or f[-1] != b"":
            raise ProtocolError("malformed request")
        env = dict(base_env)
        if tty:
            env.setdefault(b"TERM", b"xterm")
        for kv in envs:
            k, _, v = kv.partition(b"=")
            env[k] = v
        mine = []  # our ends of the command's stdio
        theirs = []
        try:
            if tty:
                self.master, slave = os.openpty()
                theirs = [slave]
                if rows and cols:
                    winsize(slave, rows, cols)
                self.stdin = os.dup(self.master)
                mine = [self.master, self.stdin]
                self.pid = start(argv, env, cwd, (slave, slave, slave), True)
                self.outputs = {self.master: b"1"}
            else:
                pipes = [os.pipe() for _ in range(3)]
                theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
                mine = [pipes[0][1], pipes[1][0], pipes[2][0]]
                for fd in mine:
                    try:  # fewer wakeups on large streams; the default is 64 KiB
                        fcntl.fcntl(fd, F_SETPIPE_SZ, 1 << 20)
                    except OSError:
                        pass
                self.pid = start(argv, env, cwd, theirs, False)
                self.stdin = mine[0]
                self.outputs = {mine[1]: b"1", mine[2]: b"2"}
        except (OSError, SpawnError) as e:
            for fd in mine:
                os.close(fd)
            self.master = self.stdin = None
            self.pid = False
            msg = e.args[0] if isinstance(e, SpawnError) else b"%d\0%s" % (e.errno or 0, (e.strerror or str(e)).encode())
            self.send(frame(b"F", msg))
            return
        finally:
            for fd in theirs:
                os.close(fd)
        children[self.pid] = self
        for fd in mine:
            os.set_blocking(fd, False)
        for fd in self.outputs:
            watch(fd, IN, self.output_handler(fd))
        self.feed()

    def feed(self):
        if self.stdin is None:
            return
        while self.stdin_buf:
            try:
                with memoryview(self.stdin_buf) as mv:
                    n = os.write(self.stdin, mv[:CHUNK])
                del self.stdin_buf[:n]
            except BlockingIOError:
                break
            except OSError:  # the command closed its stdin
                self.stdin_buf.clear()
        if self.stdin_buf:
            watch(self.stdin, OUT, self.on_stdin)
            self.update()
        elif self.stdin_eof:
            self.end_input()
        else:
            unwatch(self.stdin)
            self.update()

    def on_stdin(self, ev):
        self.feed()

    def on_output(self, fd):
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: nothing holds the terminal's other side any more
            data = b""
        if not data:
            return self.end_output(fd)
        hdr = self.outputs[fd] + len(data).to_bytes(4, "big")
        if self.out or self.gone:
            return self.send(hdr + data)
        # Nothing queued: hand both parts to the kernel without joining them first.
        try:
            n = self.sock.sendmsg([hdr, data])
        except BlockingIOError:
            n = 0
        except OSError:
            return self.drop()
        if n < len(hdr):
            self.send(hdr[n:] + data)
        elif n < len(hdr) + len(data):
            self.send(data[n - len(hdr):])

    def end_output(self, fd):
        unwatch(fd)
        del self.outputs[fd]
        close_fd(fd)
        if fd == self.master:
            self.master = None
        self.finish()

    def done(self):
        return self.status is not None and not self.outputs

    def finish(self):
        if self.done():
            self.send(frame(b"Z", b"%d" % self.status))


def reap(ev):
    try:
        while os.read(wake_r, 512):
            pass
    except BlockingIOError:
        pass
    # Any child, orphans included: without --init this process is pid 1.
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            code = os.waitstatus_to_exitcode(st)
            conn.status = 128 - code if code < 0 else code
            guard(conn.finish, conn)


def guard(fn, conn, fd=None, *args):
    """Run a handler of conn; an exception costs that connection, never the agent."""
    try:
        fn(*args)
    except Exception as e:
        if not isinstance(e, ProtocolError):
            os.write(2, b"sbx-agent: %r\n" % e)
        why = e.args[0] if isinstance(e, ProtocolError) else "internal error: %r" % e
        try:
            conn.fail(why, fd)
        except Exception as e2:  # the last resort: at least the client learns
            os.write(2, b"sbx-agent: dropping a connection: %r\n" % e2)
            conn.close()


def close_fd(fd):
    os.close(fd)
    listen(True)  # a descriptor is free again


def listen(on):
    """Watch the listener, or stop: while the agent is out of descriptors a pending
    connection keeps it readable, and epoll would wake the agent for it at once, forever."""
    global accepting
    if lst is not None and on != accepting:
        if on:
            watch(lst.fileno(), IN, accept)
        else:
            unwatch(lst.fileno())
        accepting = on


def accept(ev):
    try:
        fd, _ = lst._accept()
    except (BlockingIOError, InterruptedError):
        return
    except OSError as e:
        if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            # The connection waits in the backlog until a descriptor is freed (or a second
            # has passed); sbx's client gives up on its greeting meanwhile and uses the
            # engine's exec.
            listen(False)
        return
    s = _socket.socket(fileno=fd)
    try:
        s.setblocking(False)
        Conn(s)
    except Exception as e:
        os.write(2, b"sbx-agent: a new connection: %r\n" % e)
        unwatch(fd)
        s.close()


def take_listener():
    """The listening socket sbx made for this sandbox, received over DIR/handoff.sock, or
    None when nobody hands one over."""
    fds = []
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(HANDOFF_WAIT)
        s.connect(os.path.join(DIR, "handoff.sock"))
        msg, anc, _, _ = s.recvmsg(16, _socket.CMSG_LEN(16))
        for level, kind, data in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds += [int.from_bytes(data[i:i + 4], sys.byteorder) for i in range(0, len(data) - 3, 4)]
        if msg != frame(b"L") or len(fds) != 1:
            raise ValueError("unexpected hand-off %r with %d descriptors" % (msg, len(fds)))
        os.set_inheritable(fds[0], False)  # received without close-on-exec
        sock = _socket.socket(fileno=fds[0])
        fds.clear()
        if sock.family != _socket.AF_UNIX or not sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN):
            sock.close()
            raise ValueError("the descriptor handed over is not a listening Unix socket")
        sock.setblocking(False)
        return sock
    except (OSError, ValueError) as e:
        os.write(2, b"sbx-agent: no socket from sbx (%s); commands will come through the engine's exec\n" % str(e).encode())
        return None
    finally:
        s.close()
        for fd in fds:
            os.close(fd)


wake_r, wake_w = os.pipe()
for fd in (wake_r, wake_w):
    os.set_blocking(fd, False)
_signal.set_wakeup_fd(wake_w)
_signal.signal(_signal.SIGCHLD, lambda *_: None)
_signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)
watch(wake_r, IN, reap)

accepting = False
lst = take_listener()
listen(True)

while True:
    # Not accepting for want of descriptors: try again after a second even if none was freed.
    events = ep.poll(1 if lst is not None and not accepting else -1)
    if not events:
        listen(True)
    for fd, ev in events:
        fn = handlers.get(fd)
        if fn is None:
            continue
        conn = getattr(fn, "__self__", None) or getattr(fn, "conn", None)
        if isinstance(conn, Conn):
            guard(fn, conn, fd, ev)
            continue
        try:
            fn(ev)
        except Exception as e:  # not a connection's: log it and go on
            os.write(2, b"sbx-agent: %r\n" % e)
