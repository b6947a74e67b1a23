package shim

import "syscall"

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER (x/sys/unix has it, but importing it would
// delay this package's init: see the package comment).
const prSetChildSubreaper = 36

func init() {
	if _, marked := syscall.Getenv(MarkerName); !marked {
		return
	}
	if args, ok := shimArgs(); ok {
		syscall.Exit(run(args))
	}
}

// shimArgs returns the arguments after Mode when this process is the shim. Only the
// command line's first chunk is read for any other sbx that has Marker.
func shimArgs() ([]string, bool) {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer syscall.Close(fd)
	var line []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			break
		}
		line = append(line, buf[:n]...)
		if len(line) == n && !isShim(line) {
			return nil, false
		}
	}
	args := split(line)
	if len(args) < 2 || args[1] != Mode {
		return nil, false
	}
	return args[2:], true
}

// isShim says whether a command line's start (NUL-separated) has Mode as its first argument.
func isShim(line []byte) bool {
	i := 0
	for i < len(line) && line[i] != 0 {
		i++
	}
	rest := line[min(i+1, len(line)):]
	return len(rest) > len(Mode) && string(rest[:len(Mode)]) == Mode && rest[len(Mode)] == 0
}

// run takes "1" to make the command a child subreaper (else "0"), "--" and the command, and
// execs it as execvpe(3) would, looking it up in the PATH of its environment; or Spare, to
// wait for its command (see spare). It returns only when the command cannot
// start, with the code to exit with.
func run(args []string) int {
	_ = syscall.Unsetenv(MarkerName)
	syscall.CloseOnExec(Report)
	// The runtime has its threads now; before, a full pids limit could end it (exit 2), and
	// the agent, reading no Ready, knows the command never started.
	if _, err := syscall.Write(Report, []byte(Ready)); err != nil {
		return 127
	}
	if len(args) == 1 && args[0] == Spare {
		return spare()
	}
	if len(args) < 3 || args[1] != "--" {
		return report(0, "the agent's shim was started without a command", false)
	}
	return start(args[0] == "1", args[2:], syscall.Environ())
}

func start(reap bool, argv, env []string) int {
	if reap {
		// What the command orphans comes back to it, not to init, and stays its descendant:
		// the agent ends it with the command (see agentd).
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	}
	if !awaitGo() {
		return 127
	}
	errno := execvpe(argv[0], argv, env)
	return report(errno, errno.Error(), true)
}

// awaitGo waits for Go on Report; false is an agent that went away, or dropped the command.
func awaitGo() bool {
	buf := make([]byte, len(Go)+1)
	for {
		n, err := syscall.Read(Report, buf)
		if err != syscall.EINTR {
			return err == nil && string(buf[:max(n, 0)]) == Go
		}
	}
}

// spare waits on Report (a SOCK_SEQPACKET socket; run said Ready there) for one request, takes
// its stdio, its terminal and working directory as Go's ForkExec would have set them, and
// starts the command. It exits quietly when the agent closes the socket without a request.
func spare() int {
	buf := make([]byte, MaxRequest)
	oob := make([]byte, syscall.CmsgSpace(3*4))
	var n, oobn int
	for {
		var err error
		n, oobn, _, _, err = syscall.Recvmsg(Report, buf, oob, syscall.MSG_CMSG_CLOEXEC)
		if err != syscall.EINTR {
			if err != nil || n == 0 {
				return 0
			}
			break
		}
	}
	fds := rights(oob[:oobn])
	r, ok := parseRequest(buf[:n])
	if !ok || len(fds) != 3 {
		return report(0, "the agent's shim got a malformed request", false)
	}
	for i, fd := range fds {
		if err := syscall.Dup3(fd, i, 0); err != nil {
			return report(err.(syscall.Errno), err.Error(), false)
		}
	}
	if r.tty {
		if _, _, errno := syscall.RawSyscall(syscall.SYS_IOCTL, 0, syscall.TIOCSCTTY, 1); errno != 0 {
			return report(errno, errno.Error(), false)
		}
	}
	if r.cwd == "" { // the agent's, as Go's ForkExec keeps it
	} else if err := syscall.Chdir(r.cwd); err != nil {
		return report(err.(syscall.Errno), err.Error(), false)
	}
	return start(r.reap, r.argv, r.env)
}

// rights are the descriptors an SCM_RIGHTS message carried.
func rights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// report writes errno\0text on Report (with \0exec when the command's own exec failed) and
// returns the shim's exit code.
func report(errno syscall.Errno, text string, exec bool) int {
	msg := append(itoa(nil, int(errno)), 0)
	msg = append(msg, text...)
	if exec {
		msg = append(msg, "\x00exec"...)
	}
	_, _ = syscall.Write(Report, msg)
	return 127
}

// execvpe execs file as execvpe(3) does: a name with a slash as it is, else from the first
// of PATH's directories (/bin:/usr/bin without PATH) that holds it, and a file the kernel
// cannot run (no #! line) by /bin/sh; it returns the first error other than a missing file,
// else the last.
func execvpe(file string, argv, env []string) syscall.Errno {
	if hasSlash(file) {
		return execve(file, argv, env)
	}
	path := "/bin:/usr/bin"
	for _, kv := range env {
		if len(kv) >= 5 && kv[:5] == "PATH=" {
			path = kv[5:]
		}
	}
	var saved syscall.Errno
	last := syscall.ENOENT
	for more := true; more; {
		var dir string
		dir, path, more = cut(path, ':')
		full := file
		if dir != "" {
			full = dir + "/" + file
		}
		last = execve(full, argv, env)
		if last != syscall.ENOENT && last != syscall.ENOTDIR && saved == 0 {
			saved = last
		}
	}
	if saved != 0 {
		return saved
	}
	return last
}

// execve execs path, and a file without a #! line as a /bin/sh script, as execvp(3) does.
func execve(path string, argv, env []string) syscall.Errno {
	err := syscall.Exec(path, argv, env)
	if err == syscall.ENOEXEC {
		err = syscall.Exec("/bin/sh", append([]string{"sh", path}, argv[1:]...), env)
		if err == syscall.ENOENT {
			err = syscall.ENOEXEC
		}
	}
	errno, _ := err.(syscall.Errno)
	return errno
}

// cut is strings.Cut, which this package does not import.
func cut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func hasSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}
