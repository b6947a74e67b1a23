# sbx's in-sandbox agent: the main process of sandboxes on bundled images. It accepts
# connections on a Unix socket that sbx made on the host and handed over, and runs each
# request as a child process whose stdio it relays over the connection, so a command starts
# without the engine's exec path (containerd-shim plus runc exec, ~100 ms). It runs as the
# sandbox user under the sandbox's limits, so its children are confined exactly as an exec
# would be. It has one thread and forks only to run a request: a fork bomb that fills the
# pids limit cannot stall it. It imports only modules written in C, which keeps its start (a
# sandbox's first command waits for it) near the interpreter's own.
#
# The protocol (sockets, frames, the request, strict modes, limits and errors) is written
# once, in PROTOCOL.md beside this file; the FRAME_* and STRICT_* constants below are
# mirrored in Go (pkg/agent), and a test checks that both sides agree. The socket's
# directory (DIR) is mounted read-only, so nothing in the sandbox can store a byte there,
# the agent included: sbx binds the listening socket on the host and passes it over
# handoff.sock, the one socket the agent connects to (connecting needs no write access).
#
# Ending a command: TERM to what belongs to it, then KILL after the grace period to what
# still does. What belongs to it is its process group and session (the command starts as
# their leader, and the agent reaps it only once it is done with them, so their IDs cannot
# be reused meanwhile), every descendant of those by parent links, and what got TERM. With
# reap 1 the command is a child subreaper (PR_SET_CHILD_SUBREAPER, kept across execve), so
# what its processes orphan while it runs, setsid and double fork included, comes back to
# it instead of to init and stays its descendant. The agent ends a command at its timeout
# (sending T first), on K, and when the command's main process exits (whatever is left).
# At the KILL it stops what belongs to the command first (SIGSTOP, until nothing new shows
# up), so nothing forks away between the look and the kill. It reports Z at most KILL_DRAIN
# after the KILL, or EXIT_DRAIN after what was left at the exit is gone, even when processes
# it cannot attribute still hold the command's output open; it then stops reading it.
# A client that goes away ends the command as its strict mode says (PROTOCOL.md). With reap
# 0 (sbx's own launchers of background processes and shell sessions, which start processes
# meant to outlive the exec) the command is no subreaper, and ending it, on K or for a
# client gone, only sends TERM to its process group.
#
# A relay (a C request instead of R) runs no command: the agent connects to a port on the
# sandbox's loopback and moves bytes both ways, with the same bounds as a command's stdio
# (reading stops while HIGH bytes wait on either side), so a port forward needs no engine
# port publishing and works with no network at all.
import os, sys, errno, select, fcntl, termios, time, _signal, _socket

VERSION, DIR = sys.argv[1], sys.argv[2]
# idleStop in milliseconds (0: off): the agent ends, and the sandbox stops, once nothing ran
# for that long (PROTOCOL.md, "Idle stop").
IDLE_STOP = int(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0
FRAME_HELLO = b"H"
FRAME_REQUEST = b"R"
FRAME_PROCESS = b"P"
FRAME_SPAWN_FAILED = b"F"
FRAME_STDOUT = b"1"
FRAME_STDERR = b"2"
FRAME_STDIN = b"I"
FRAME_STDIN_EOF = b"E"
FRAME_RESIZE = b"W"
FRAME_ABORT = b"K"
FRAME_TIMEOUT = b"T"
FRAME_EXIT = b"Z"
FRAME_REFUSED = b"X"
FRAME_LISTENER = b"L"
FRAME_STATUS = b"S"
FRAME_CONNECT = b"C"
FRAME_CONNECTED = b"O"
CLIENT_FRAMES = FRAME_REQUEST + FRAME_CONNECT + FRAME_STDIN + FRAME_STDIN_EOF + FRAME_RESIZE + FRAME_ABORT + FRAME_STATUS
STRICT_NONE = b"0"
STRICT_STDIN = b"1"
STRICT_EXIT = b"2"
CHUNK = 256 << 10
HIGH = 4 << 20
MAX_FRAME = 8 << 20  # a request holds argv and environment: the kernel takes at most 6 MiB
HANDOFF_WAIT = 30  # seconds; sbx sends the listener as soon as it accepts
POLL = 0.2  # seconds between looks at what is left of a command being ended
KILL_DRAIN = 0.2  # seconds output may still come after the KILL before Z
EXIT_DRAIN = 1.0  # seconds others may hold output open after the command and its group ended
F_SETPIPE_SZ = 1031
PR_SET_CHILD_SUBREAPER = 36
IN, OUT = select.EPOLLIN, select.EPOLLOUT
ep = select.epoll()
handlers = {}  # fd -> callable(events)
jobs = {}  # pid -> Job, until the agent reaps the command
timers = []  # [due, fn]: fn None once cancelled
base_env = dict(os.environb)
MYPID = os.getpid()
clients = set()  # open connections, but for status queries
idle_since = time.monotonic()  # the last time the sandbox was seen in use


def load_prctl():
    """prctl(2) through _ctypes (written in C, unlike the ctypes package), or None."""
    try:
        import _ctypes

        class Int(_ctypes._SimpleCData):
            _type_ = "i"

        class Fn(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = Int

        return Fn(_ctypes.dlsym(_ctypes.dlopen(None, 0), "prctl"))
    except Exception as e:
        os.write(2, b"sbx-agent: no prctl (%r): commands are no subreapers\n" % e)
        return None


prctl = load_prctl()


def later(delay, fn):
    t = [time.monotonic() + delay, fn]
    timers.append(t)
    return t


def cancel(t):
    if t is not None:
        t[1] = None


def run_timers():
    now = time.monotonic()
    due = [t for t in timers if t[0] <= now and t[1] is not None]
    timers[:] = [t for t in timers if t[0] > now and t[1] is not None]
    for t in due:
        fn, t[1] = t[1], None
        try:
            fn()
        except Exception as e:
            os.write(2, b"sbx-agent: %r\n" % e)


def next_timer():
    """Seconds until the next timer is due, or None."""
    due = [t[0] for t in timers if t[1] is not None]
    return max(0, min(due) - time.monotonic()) if due else None


def procs():
    """pid -> (state, ppid, pgid, sid, start) of every process in the sandbox; empty when
    /proc cannot be read (out of descriptors)."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        e = stat(name)
        if e is not None:
            table[int(name)] = e
    return table


def stat(pid):
    try:
        fd = os.open("/proc/%s/stat" % pid, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 2048)
    except OSError:
        return None
    finally:
        os.close(fd)
    f = data[data.rfind(b")") + 2:].split()  # the name may hold spaces and parentheses
    if len(f) < 20:
        return None
    return f[0], int(f[1]), int(f[2]), int(f[3]), int(f[19])


def sig_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


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


def start(argv, env, cwd, fds, tty, reap):
    """fork and exec argv with fds as its stdio in a new session, a child subreaper with
    reap; returns its pid."""
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
            if reap and prctl is not None:
                prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
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
        self.job = None
        self.status = None
        self.reported = False  # Z was sent (or would have been, to a client gone)
        self.outputs = {}  # output fd -> stream byte, while open
        self.paused = False
        self.master = None  # the terminal's master side in TTY mode
        self.stdin = None
        self.stdin_buf = bytearray()
        self.stdin_eof = False
        self.strict = STRICT_NONE
        self.reap = False
        self.relay = False  # a C request: stdin and the output are one socket to a port
        self.peer = None  # that socket while it connects
        used(self)
        self.send(frame(FRAME_HELLO, VERSION.encode()))

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
        # A relay's port keeps what the client has not taken in its own socket buffer: read
        # only when nothing is queued, and it goes to the client without a copy here.
        self.pause(len(self.out) > (0 if self.relay else HIGH))

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
            if t == FRAME_STDIN:  # the bulk of a copy: straight to the pipe when nothing waits
                if not self.stdin_eof:
                    with memoryview(self.inbuf) as mv:
                        data, done = mv[5:5 + n], 0
                        if not self.stdin_buf and self.stdin is not None:
                            try:
                                done = os.write(self.stdin, data)
                            except BlockingIOError:
                                pass
                            except OSError:  # the command closed its stdin
                                if self.relay:  # the port reset: so does the relay
                                    del data
                                    return self.drop()
                                done = n
                        self.stdin_buf += data[done:]
                        del data
                del self.inbuf[:5 + n]
                self.feed()
                continue
            data = bytes(self.inbuf[5:5 + n])
            del self.inbuf[:5 + n]
            if t == FRAME_STATUS:
                if self.pid is not None:
                    raise ProtocolError("a status query on a command's connection")
                clients.discard(self)  # asking is no use of the sandbox
                self.status, self.reported = 0, True  # nothing runs: it ends once answered
                self.send(frame(FRAME_STATUS, idle_status()))
            elif t == FRAME_REQUEST:
                if self.pid is not None or self.reported:
                    raise ProtocolError("a second request on one connection")
                self.spawn(data.split(b"\0"))
            elif t == FRAME_CONNECT:
                if self.pid is not None or self.reported:
                    raise ProtocolError("a second request on one connection")
                self.connect(data)
            elif t == FRAME_STDIN_EOF:
                self.stdin_eof = True
                self.feed()
            elif t == FRAME_ABORT:
                self.abort()
            elif t == FRAME_RESIZE:
                rows, cols = data.split()
                if self.master is not None:
                    winsize(self.master, int(rows), int(cols))

    def abort(self):
        # Before the input ends: the command dies, or cleans up and exits, without ever
        # reading an end of input.
        if self.job is not None and self.status is None:
            if self.reap:
                self.job.end()
            else:
                sig_all([-self.pid], _signal.SIGTERM)
        self.end_input()

    def end_input(self):
        """Close the command's stdin now, dropping what was not written yet."""
        self.stdin_buf.clear()
        self.stdin_eof = True
        if self.stdin is not None:
            unwatch(self.stdin)
            if self.relay:  # the port reads its end of input; the socket stays open for reading
                shutdown_write(self.stdin)
            close_fd(self.stdin)  # a terminal's copy only: it has no EOF to pass on
            self.stdin = None
            if self.relay:
                self.finish()
        self.update()

    def drop(self):
        """The client went away: end the command's input, keep draining its output."""
        if (self.strict == STRICT_EXIT or self.strict == STRICT_NONE and self.reap) and self.status is None or self.strict == STRICT_STDIN and not self.stdin_eof:
            self.abort()
        self.close()
        self.out.clear()
        self.end_input()
        self.pause(False)
        if self.peer is not None:  # still connecting
            unwatch(self.peer.fileno())
            self.peer.close()
            self.peer = None
            listen(True)
        if self.relay:  # nobody reads the port's data any more
            for fd in list(self.outputs):
                self.end_output(fd)
        if self.master is not None:  # hang up the terminal
            self.end_output(self.master)

    def fail(self, why, fd=None):
        """Give up on the connection (a frame refused, or a bug in a handler of fd): tell the
        client why if its socket takes it at once, then drop it as a client that went away."""
        if not self.gone:
            self.out += frame(FRAME_REFUSED, why.encode("utf-8", "replace")[:4096])
            try:
                self.sock.send(self.out)
            except OSError:
                pass
        if fd in self.outputs:  # its handler failed: never read it again
            self.end_output(fd)
        self.drop()

    def close(self):
        if self in clients:
            used(None)
            clients.discard(self)
        if not self.gone:
            unwatch(self.fd)
            self.events = 0
            self.gone = True
            self.sock.close()
            listen(True)  # a descriptor is free again

    def spawn(self, f):
        try:
            tty, rows, cols, self.strict = f[0] == b"1", int(f[1]), int(f[2]), f[3]
            timeout, grace, self.reap = int(f[4]) / 1000, int(f[5]) / 1000, f[6] == b"1"
            cwd, argc = f[7], int(f[8])
        except (IndexError, ValueError):
            raise ProtocolError("malformed request") from None
        argv, envs = f[9:9 + argc], f[9 + argc:-1]
        if not argv or len(argv) != argc or f[-1] != b"" or not (0 <= rows < 1 << 16 and 0 <= cols < 1 << 16):
            raise ProtocolError("malformed request")
        env = dict(base_env)
        if tty:
            env.setdefault(b"TERM", b"xterm")
        for kv in envs:
            k, _, v = kv.partition(b"=")
            env[k] = v
        mine = []  # our ends of the command's stdio, each listed as soon as it is open
        theirs = []
        try:
            if tty:
                master, slave = os.openpty()
                mine.append(master)
                theirs.append(slave)
                if rows and cols:
                    winsize(slave, rows, cols)
                mine.append(os.dup(master))
                self.pid = start(argv, env, cwd, (slave, slave, slave), True, self.reap)
                self.master, self.stdin = mine
                self.outputs = {master: FRAME_STDOUT}
            else:
                for i in range(3):  # the command reads the first and writes the others
                    r, w = os.pipe()
                    mine.append(w if i == 0 else r)
                    theirs.append(r if i == 0 else w)
                for fd in mine:
                    try:  # fewer wakeups on large streams; the default is 64 KiB
                        fcntl.fcntl(fd, F_SETPIPE_SZ, 1 << 20)
                    except OSError:
                        pass
                self.pid = start(argv, env, cwd, theirs, False, self.reap)
                self.stdin = mine[0]
                self.outputs = {mine[1]: FRAME_STDOUT, mine[2]: FRAME_STDERR}
        except Exception as e:
            for fd in mine:  # whatever failed, the agent keeps no descriptor of this command
                os.close(fd)
            if not isinstance(e, (OSError, SpawnError)):
                raise
            self.pid = False
            msg = e.args[0] if isinstance(e, SpawnError) else b"%d\0%s" % (e.errno or 0, (e.strerror or str(e)).encode())
            self.send(frame(FRAME_SPAWN_FAILED, msg))
            return
        finally:
            for fd in theirs:
                os.close(fd)
        self.job = Job(self, self.pid, timeout, grace)
        self.send(frame(FRAME_PROCESS, b"%d %d %d" % (self.pid, self.job.start, MYPID)))
        for fd in mine:
            os.set_blocking(fd, False)
        for fd in self.outputs:
            watch(fd, IN, self.output_handler(fd))
        self.feed()

    def connect(self, data):
        """Start a relay to the port data names on the sandbox's loopback (PROTOCOL.md)."""
        try:
            port = int(data)
        except ValueError:
            raise ProtocolError("malformed request") from None
        if not 0 < port < 1 << 16 or data != b"%d" % port:
            raise ProtocolError("malformed request")
        self.pid = False
        self.relay = True
        try:
            s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        except OSError as e:  # out of descriptors
            return self.connected(e.errno or errno.EMFILE)
        s.setblocking(False)
        self.peer = s
        err = s.connect_ex(("127.0.0.1", port))
        if err == errno.EINPROGRESS and not writable(s.fileno()):
            watch(s.fileno(), OUT, self.on_connect)
        elif err == errno.EINPROGRESS:  # loopback usually answers within the call
            self.connected(s.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR))
        else:
            self.connected(err)

    def on_connect(self, ev):
        unwatch(self.peer.fileno())
        self.connected(self.peer.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR))

    def connected(self, err):
        s, self.peer = self.peer, None
        if err:
            if s is not None:
                s.close()
                listen(True)
            self.send(frame(FRAME_SPAWN_FAILED, b"%d\0%s" % (err, os.strerror(err).encode())))
            return self.finish()
        fd = s.detach()  # from here on a plain descriptor, closed by end_output
        try:
            self.stdin = os.dup(fd)  # the writing side, shut down at the client's E
        except OSError:
            os.close(fd)
            listen(True)
            raise
        self.outputs = {fd: FRAME_STDOUT}
        self.send(frame(FRAME_CONNECTED))
        if not self.paused:
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
                if self.relay:  # the port reset: so does the relay
                    return self.drop()
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
            if self.relay:  # the port reset: so does the relay
                return self.drop()
            data = b""
        if not data:
            if self.relay:
                self.send(frame(FRAME_STDIN_EOF))
            return self.end_output(fd)
        hdr = self.outputs[fd] + len(data).to_bytes(4, "big")
        if self.out or self.gone:
            if not self.gone:
                self.out += hdr
            return self.send(data)
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
        if self.relay:  # both ways ended, or the connection never came about
            return self.peer is None and self.stdin is None and not self.outputs
        return self.status is not None and not self.outputs

    def finish(self):
        if self.done() and not self.reported:
            self.reported = True
            if self.relay:  # nothing more to say: close once what is queued is sent
                if not self.out:
                    self.close()
                return
            self.send(frame(FRAME_EXIT, b"%d" % self.status))
            self.end_input()  # without E (sbx sends none without -i) it would stay open

    def force(self):
        """Report the end now with what the outputs hold at this moment: processes the agent
        could not attribute to the command hold them open, or the command is not reaped yet
        after its KILL."""
        if self.reported:
            return
        if self.status is None:
            self.status = 128 + _signal.SIGKILL
        for fd in list(self.outputs):
            for _ in range(16):  # what is there, up to 4 MiB, never a stream without end
                try:
                    data = os.read(fd, CHUNK)
                except BlockingIOError:
                    break
                except OSError:
                    data = b""
                if not data:
                    break
                self.send(self.outputs[fd] + len(data).to_bytes(4, "big") + data)
            if fd in self.outputs:
                self.end_output(fd)
        self.finish()


RUN, TERM, DONE = "run", "term", "done"


class Job:
    """A command's processes, from its start until the agent has ended what was left of
    them and reaped the command: until then the command's pid, and so its group's and
    session's IDs, cannot be reused (a zombie keeps it)."""

    def __init__(self, conn, pid, timeout, grace):
        self.conn, self.pid, self.grace = conn, pid, grace
        e = stat(pid)
        self.start = e[4] if e else 0
        self.status = None  # the command's exit code, once it exited
        self.phase = RUN
        self.timed_out = False
        self.marked = {}  # pid -> start of each process TERM or STOP went to
        self.timers = [later(timeout, self.expire) if timeout > 0 else None]
        jobs[pid] = self

    def members(self, table):
        """The processes in table that belong to the command (see the top of this file)."""
        found = {p for p, e in table.items() if e[2] == self.pid or e[3] == self.pid}
        if self.pid in table:
            found.add(self.pid)
        found.update(p for p, st in self.marked.items() if p in table and table[p][4] == st)
        kids = {}
        for p, e in table.items():
            kids.setdefault(e[1], []).append(p)
        todo = list(found)
        while todo:
            for c in kids.get(todo.pop(), ()):
                if c not in found:
                    found.add(c)
                    todo.append(c)
        found.difference_update((1, MYPID))
        return found

    def live(self, table):
        """members that have not exited (a zombie only waits for its parent)."""
        return [p for p in self.members(table) if table[p][0] != b"Z"]

    def expire(self):
        self.timed_out = True
        self.conn.send(frame(FRAME_TIMEOUT))
        self.end()

    def end(self):
        """TERM what belongs to the command, KILL after the grace period what still does."""
        if self.phase != RUN:
            return
        table = procs()
        left = self.live(table)
        if not left and table:
            return self.done(False)
        self.phase = TERM
        self.marked.update((p, table[p][4]) for p in left)
        # The group first, in one step: signalled one by one, a shell could see its child die
        # of TERM and go on (even exec its next command) before its own TERM came.
        sig_all([-self.pid] + left, _signal.SIGTERM)
        cancel(self.timers[0])
        self.timers = [later(self.grace, self.kill), later(POLL, self.poll)]

    def poll(self):
        if self.phase != TERM:
            return
        table = procs()
        if table and not self.live(table):
            return self.done(False)
        self.timers.append(later(POLL, self.poll))

    def kill(self):
        """Stop, until no new process shows up, then KILL, so nothing forks away."""
        if self.phase != TERM:
            return
        stopped = {}
        for _ in range(16):
            table = procs()
            new = [p for p in self.live(table) if stopped.get(p) != table[p][4]]
            if not new:
                break
            for p in new:
                stopped[p] = self.marked[p] = table[p][4]
            sig_all(new, _signal.SIGSTOP)
        sig_all(list(stopped) + [-self.pid], _signal.SIGKILL)
        self.done(True)

    def done(self, killed):
        self.phase = DONE
        for t in self.timers:
            cancel(t)
        self.release()
        c = self.conn
        if not c.reported:
            later(KILL_DRAIN if killed or self.timed_out else EXIT_DRAIN, lambda: guard(c.force, c))

    def exited(self, code):
        self.status = code
        c = self.conn
        if c.status is None:
            c.status = code
            guard(c.finish, c)
        if self.phase == RUN:
            self.end()
        elif self.phase == DONE:
            self.release()

    def release(self):
        """Reap the command once the agent is done with its IDs, if it has exited."""
        if self.status is not None and jobs.pop(self.pid, None) is not None:
            try:
                os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pass


def reap(ev):
    try:
        while os.read(wake_r, 512):
            pass
    except BlockingIOError:
        pass
    for job in list(jobs.values()):
        if job.status is not None:
            continue
        try:  # WNOWAIT: the zombie keeps the command's IDs until the job is done
            r = os.waitid(os.P_PID, job.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            r = None
        if r is not None and r.si_pid:
            code = r.si_status if r.si_code == os.CLD_EXITED else 128 + r.si_status
            guard(job.exited, job.conn, None, code)
    if MYPID == 1:  # without --init, orphans come to the agent
        for pid, e in procs().items():
            if e[1] == 1 and e[0] == b"Z" and pid not in jobs:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass


def used(conn):
    """A client came (conn) or went (None): the sandbox was in use just now, however short
    the use was next to the idle checks' interval."""
    global idle_since
    idle_since = time.monotonic()
    if conn is not None:
        clients.add(conn)


def busy():
    """Whether the sandbox is in use: a client connected (sbx holds a lease while it works in
    the sandbox, port forwards included: see idle_tick), or a process other than init and the
    agent (commands, background processes, shell sessions, the engine's execs)."""
    if clients:
        return True
    return any(pid not in (1, MYPID) and e[0] != b"Z" for pid, e in procs().items())


def leased(keep=False):
    """Whether an sbx on the host holds the sandbox's lease (a shared flock on idle.lock): a
    command, a copy or a port forward in progress. With keep, a free lock stays taken, so no
    sbx can start using the sandbox until the agent has exited."""
    try:
        fcntl.flock(idle_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    if not keep:
        fcntl.flock(idle_lock, fcntl.LOCK_UN)
    return False


def idle_tick():
    """Stop the sandbox (the agent, its main process, exits) once it was idle for IDLE_STOP."""
    global idle_since
    now = time.monotonic()
    if busy() or leased():
        idle_since = now
    elif now - idle_since >= IDLE_STOP and not leased(keep=True):
        # The lease is the agent's now: an sbx that comes meanwhile waits for the exit and
        # then finds the sandbox stopped, and starts it.
        os.write(2, b"sbx-agent: idle for %ds (idleStop); stopping the sandbox\n" % int(now - idle_since))
        os._exit(0)
    later(max(0.25, min(IDLE_STOP / 4, 5)), idle_tick)


def idle_status():
    """The answer to a status query: "off" without idle stop, "busy" while the sandbox is in
    use, else the milliseconds left until it stops."""
    if not IDLE_STOP:
        return b"off"
    if busy() or leased():
        return b"busy"
    return b"%d" % max(0, int((IDLE_STOP - (time.monotonic() - idle_since)) * 1000))


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


def writable(fd):
    """Whether fd takes a write now: a connection to loopback is usually made by then."""
    p = select.poll()
    p.register(fd, select.POLLOUT)
    return bool(p.poll(0))


def shutdown_write(fd):
    """End what a relay writes to its port, which keeps reading the port's answer."""
    s = _socket.socket(fileno=fd)
    try:
        s.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    finally:
        s.detach()


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
            later(1, lambda: listen(True))
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
        if msg != frame(FRAME_LISTENER) or len(fds) != 1:
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

idle_lock = None
if IDLE_STOP:
    try:  # linked by sbx before the start; read-only is enough for a flock
        idle_lock = os.open(os.path.join(DIR, "idle.lock"), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        idle_tick()
    except OSError as e:  # without it a stop could come between sbx's check and its command
        os.write(2, b"sbx-agent: no idle.lock (%r); the sandbox will not stop for idleness\n" % e)

while True:
    wait = next_timer()
    events = ep.poll(-1 if wait is None else wait)
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
    run_timers()
