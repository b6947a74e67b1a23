# sbx's in-sandbox agent: the main process of sandboxes on bundled images. It listens on a
# Unix socket in a directory the host bind-mounts and runs each request as a child process
# whose stdio it relays over the connection, so a command starts without the engine's exec
# path (containerd-shim plus runc exec, ~100 ms). It runs as the sandbox user under the
# sandbox's limits, so its children are confined exactly as an exec would be. It has one
# thread and forks only to run a request: a fork bomb that fills the pids limit cannot stall
# it.
#
# Frames both ways: 1 byte type, 4 bytes big-endian length, payload.
#   agent -> client: H hello (version), 1 stdout, 2 stderr, F spawn failure (JSON), Z exit code
#   client -> agent: R request (JSON, strings base64), I stdin, E stdin EOF, W "rows cols",
#                    K abort: terminate the command's process group
# A client that goes away closes the command's stdin (or hangs up its terminal); sbx's exec
# wrapper takes that as the signal to end the command. With "strict" in the request, a
# client that goes away before E terminates the command's process group first, so a cut
# stream is never taken for a complete one.
import base64, fcntl, json, os, selectors, signal, socket, struct, subprocess, sys, termios

VERSION, DIR = sys.argv[1], sys.argv[2]
HDR = struct.Struct(">cI")
CHUNK = 256 << 10
HIGH = 4 << 20
F_SETPIPE_SZ = 1031
sel = selectors.DefaultSelector()
children = {}
base_env = dict(os.environb)


def frame(t, data=b""):
    return HDR.pack(t, len(data)) + data


def winsize(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def ctty():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.sock_events = 0
        self.inbuf = bytearray()
        self.out = bytearray()
        self.gone = False
        self.proc = None
        self.status = None
        self.outputs = {}  # output fd -> stream byte, while open
        self.files = {}  # fd -> file object owning it
        self.paused = False
        self.master = None  # the terminal's master side in TTY mode
        self.stdin = None
        self.stdin_buf = bytearray()
        self.stdin_eof = False
        self.strict = False
        self.send(frame(b"H", VERSION.encode()))

    def send(self, data):
        if not self.gone:
            self.out += data
            self.update()

    def update(self):
        if self.gone:
            return
        ev = selectors.EVENT_READ if len(self.stdin_buf) < HIGH else 0
        if self.out:
            ev |= selectors.EVENT_WRITE
        if ev != self.sock_events:
            if not self.sock_events:
                sel.register(self.sock, ev, self)
            elif not ev:
                sel.unregister(self.sock)
            else:
                sel.modify(self.sock, ev, self)
            self.sock_events = ev
        self.pause(len(self.out) > HIGH)

    def pause(self, on):
        """Stop reading the command's output while the client is behind."""
        if on != self.paused:
            self.paused = on
            for fd in self.outputs:
                if on:
                    sel.unregister(fd)
                else:
                    sel.register(fd, selectors.EVENT_READ, (self, fd))

    def on_sock(self, mask):
        if mask & selectors.EVENT_WRITE:
            try:
                del self.out[:self.sock.send(self.out)]
            except BlockingIOError:
                pass
            except OSError:
                return self.drop()
            if not self.out and self.done():
                return self.close()
        if mask & selectors.EVENT_READ:
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
        while len(self.inbuf) >= HDR.size and not self.gone:
            t, n = HDR.unpack_from(self.inbuf)
            if len(self.inbuf) < HDR.size + n:
                return
            if t == b"I":  # the bulk of a copy: moved once, not sliced twice
                if not self.stdin_eof:
                    with memoryview(self.inbuf) as mv:
                        self.stdin_buf += mv[HDR.size:HDR.size + n]
                del self.inbuf[:HDR.size + n]
                self.feed()
                continue
            data = bytes(self.inbuf[HDR.size:HDR.size + n])
            del self.inbuf[:HDR.size + n]
            if t == b"R" and self.proc is None:
                self.spawn(json.loads(data))
            elif t == b"E":
                self.stdin_eof = True
                self.feed()
            elif t == b"K":
                self.abort()
            elif t == b"W" and self.master is not None:
                rows, cols = (int(x) for x in data.split())
                winsize(self.master, rows, cols)

    def abort(self):
        # TERM before the input ends: the command dies, or cleans up and exits, without
        # ever reading an end of input; sbx's watchdog KILLs what remains of the group.
        if self.proc and self.status is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                pass
        self.stdin_buf.clear()
        self.stdin_eof = True
        self.feed()

    def drop(self):
        """The client went away: end the command's input, keep draining its output."""
        if self.strict and not self.stdin_eof:
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
            if self.sock_events:
                sel.unregister(self.sock)
            self.sock_events = 0
            self.gone = True
            self.sock.close()

    def spawn(self, req):
        self.strict = bool(req.get("strict"))
        argv = [base64.b64decode(a) for a in req["argv"]]
        cwd = base64.b64decode(req["cwd"]) if req.get("cwd") else None
        env = dict(base_env)
        if req.get("tty"):
            env.setdefault(b"TERM", b"xterm")
        for kv in req.get("env") or []:
            k, _, v = base64.b64decode(kv).partition(b"=")
            env[k] = v
        try:
            if req.get("tty"):
                self.master, slave = os.openpty()
                try:
                    if req.get("rows") and req.get("cols"):
                        winsize(slave, req["rows"], req["cols"])
                    self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                                                 env=env, start_new_session=True, preexec_fn=ctty)
                finally:
                    os.close(slave)
                self.stdin = os.dup(self.master)
                self.outputs = {self.master: b"1"}
                self.files = {fd: open(fd, "rb", buffering=0) for fd in (self.master, self.stdin)}
            else:
                self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, cwd=cwd, env=env, start_new_session=True)
                p = self.proc
                self.stdin = p.stdin.fileno()
                self.outputs = {p.stdout.fileno(): b"1", p.stderr.fileno(): b"2"}
                self.files = {f.fileno(): f for f in (p.stdin, p.stdout, p.stderr)}
        except OSError as e:
            if self.master is not None:
                os.close(self.master)
                self.master = None
            self.proc = False
            self.send(frame(b"F", json.dumps({"errno": e.errno or 0, "error": e.strerror or str(e)}).encode()))
            return
        children[self.proc.pid] = self
        for fd in (self.stdin, *self.outputs):
            os.set_blocking(fd, False)
            if self.master is None:
                try:  # fewer wakeups on large streams; the default is 64 KiB
                    fcntl.fcntl(fd, F_SETPIPE_SZ, 1 << 20)
                except OSError:
                    pass
        for fd in self.outputs:
            sel.register(fd, selectors.EVENT_READ, (self, fd))
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
        registered = self.stdin in sel.get_map()
        if self.stdin_buf and not registered:
            sel.register(self.stdin, selectors.EVENT_WRITE, (self, -1))
        elif not self.stdin_buf and registered:
            sel.unregister(self.stdin)
        if not self.stdin_buf and self.stdin_eof:
            self.files.pop(self.stdin).close()  # a terminal's copy only: it has no EOF to pass on
            self.stdin = None
        self.update()

    def on_output(self, fd):
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: nothing holds the terminal's other side any more
            data = b""
        if data:
            self.send(frame(self.outputs[fd], data))
        else:
            self.end_output(fd)

    def end_output(self, fd):
        if not self.paused:
            sel.unregister(fd)
        del self.outputs[fd]
        self.files.pop(fd).close()
        if fd == self.master:
            self.master = None
        self.finish()

    def done(self):
        return self.status is not None and not self.outputs

    def finish(self):
        if self.done():
            self.send(frame(b"Z", str(self.status).encode()))


def reap():
    # Any child, orphans included: without --init this process is pid 1.
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(st)
        conn.status = 128 - code if code < 0 else code
        if conn.proc:
            conn.proc.returncode = conn.status
        conn.finish()


def serve():
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    sel.register(wake_r, selectors.EVENT_READ, "wake")

    tmp = os.path.join(DIR, ".agent.%d.sock" % os.getpid())
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(tmp)
    os.chmod(tmp, 0o666)  # the host user connecting need not be the sandbox user
    lst.listen(128)
    lst.setblocking(False)
    os.rename(tmp, os.path.join(DIR, "agent.sock"))  # never a socket that does not listen yet
    sel.register(lst, selectors.EVENT_READ, None)

    while True:
        for key, mask in sel.select():
            d = key.data
            if d is None:
                try:
                    s, _ = lst.accept()
                except OSError:
                    continue
                s.setblocking(False)
                Conn(s)
            elif d == "wake":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap()
            elif isinstance(d, Conn):
                d.on_sock(mask)
            else:
                conn, fd = d
                if fd == -1:
                    conn.feed()
                elif fd in conn.outputs:
                    conn.on_output(fd)


serve()
