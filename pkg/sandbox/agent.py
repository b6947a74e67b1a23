# sbx's in-sandbox agent: the main process of sandboxes on bundled images. It listens on a
# Unix socket in a directory the host bind-mounts and runs each request as a child process
# whose stdio it relays over the connection, so a command starts without the engine's exec
# path (containerd-shim plus runc exec, ~100 ms). It runs as the sandbox user under the
# sandbox's limits, so its children are confined exactly as an exec would be. It has one
# thread and forks only to run a request: a fork bomb that fills the pids limit cannot stall
# it. It imports only modules written in C, which keeps its start (a sandbox's first
# command waits for it) near the interpreter's own.
#
# Frames both ways: 1 byte type, 4 bytes big-endian length, payload.
#   agent -> client: H hello (version), 1 stdout, 2 stderr, F spawn failure ("errno\0text"),
#                    Z exit code
#   client -> agent: R request, I stdin, E stdin EOF, W "rows cols", K abort: terminate the
#                    command's process group
# A request is NUL-terminated fields: tty, rows, cols, strict, cwd, argc, argv..., env...
# A client that goes away closes the command's stdin (or hangs up its terminal); sbx's exec
# wrapper takes that as the signal to end the command. With strict 1, a client that goes
# away before E terminates the command's process group first, so a cut stream is never
# taken for a complete one; with strict 2 (a command that owns its stdin, so the wrapper
# cannot see the client go), a client that goes away before the exit does.
import os, sys, select, fcntl, termios, _signal, _socket

VERSION, DIR = sys.argv[1], sys.argv[2]
CHUNK = 256 << 10
HIGH = 4 << 20
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
            if t == b"R" and self.pid is None:
                self.spawn(data.split(b"\0"))
            elif t == b"E":
                self.stdin_eof = True
                self.feed()
            elif t == b"K":
                self.abort()
            elif t == b"W" and self.master is not None:
                rows, cols = data.split()
                winsize(self.master, int(rows), int(cols))

    def abort(self):
        # TERM before the input ends: the command dies, or cleans up and exits, without
        # ever reading an end of input; sbx's watchdog KILLs what remains of the group.
        if self.pid and self.status is None:
            try:
                os.killpg(self.pid, _signal.SIGTERM)
            except OSError:
                pass
        self.stdin_buf.clear()
        self.stdin_eof = True
        self.feed()

    def drop(self):
        """The client went away: end the command's input, keep draining its output."""
        if self.strict == b"2" and self.status is None or self.strict == b"1" and not self.stdin_eof:
            self.abort()
        self.close()
        self.out.clear()
        self.stdin_buf.clear()
        self.stdin_eof = True
        self.feed()
        self.pause(False)
        if self.master is not None:  # hang up the terminal
            self.end_output(self.master)

    def close(self):
        if not self.gone:
            unwatch(self.fd)
            self.events = 0
            self.gone = True
            self.sock.close()

    def spawn(self, f):
        tty, rows, cols, self.strict, cwd = f[0] == b"1", int(f[1]), int(f[2]), f[3], f[4]
        argc = int(f[5])
        argv, envs = f[6:6 + argc], f[6 + argc:-1]
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
        else:
            unwatch(self.stdin)
            if self.stdin_eof:
                os.close(self.stdin)  # a terminal's copy only: it has no EOF to pass on
                self.stdin = None
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
        os.close(fd)
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
            conn.finish()


def accept(ev):
    try:
        fd, _ = lst._accept()
    except OSError:
        return
    s = _socket.socket(fileno=fd)
    s.setblocking(False)
    Conn(s)


wake_r, wake_w = os.pipe()
for fd in (wake_r, wake_w):
    os.set_blocking(fd, False)
_signal.set_wakeup_fd(wake_w)
_signal.signal(_signal.SIGCHLD, lambda *_: None)
_signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)
watch(wake_r, IN, reap)

tmp = os.path.join(DIR, ".agent.%d.sock" % os.getpid())
try:
    os.unlink(tmp)
except FileNotFoundError:
    pass
lst = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
lst.bind(tmp)
os.chmod(tmp, 0o666)  # the host user connecting need not be the sandbox user
lst.listen(128)
lst.setblocking(False)
os.rename(tmp, os.path.join(DIR, "agent.sock"))  # never a socket that does not listen yet
watch(lst.fileno(), IN, accept)

while True:
    for fd, ev in ep.poll():
        fn = handlers.get(fd)
        if fn is None:
            continue
        try:
            fn(ev)
        except Exception as e:  # a bug must cost one command, not the sandbox
            os.write(2, b"sbx-agent: %r\n" % e)
            unwatch(fd)
            conn = getattr(fn, "__self__", None) or getattr(fn, "conn", None)
            if isinstance(conn, Conn):
                conn.close()
