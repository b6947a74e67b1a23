package shim

import "syscall"

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER (x/sys/unix has it, but importing it would
// delay this package's init: see the package comment).
const prSetChildSubreaper = 36

func init() {
	if args, ok := shimArgs(); ok {
		syscall.Exit(run(args))
	}
}

// shimArgs returns the arguments after Mode when this process is the shim. Only the
// command line's first chunk is read for any other sbx.
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

// split cuts a NUL-terminated command line into its arguments.
func split(line []byte) []string {
	var args []string
	start := 0
	for i, c := range line {
		if c == 0 {
			args = append(args, string(line[start:i]))
			start = i + 1
		}
	}
	return args
}

// run takes "1" to make the command a child subreaper (else "0"), "--" and the command, and
// execs it as execvpe(3) would, looking it up in the PATH of its environment. It returns
// only when the command cannot start, with the code to exit with.
func run(args []string) int {
	syscall.CloseOnExec(Report)
	if len(args) < 3 || args[1] != "--" {
		return report(0, "the agent's shim was started without a command")
	}
	if args[0] == "1" {
		// What the command orphans comes back to it, not to init, and stays its descendant:
		// the agent ends it with the command (see agentd).
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	}
	argv := args[2:]
	errno := execvpe(argv[0], argv, syscall.Environ())
	return report(errno, errno.Error())
}

func report(errno syscall.Errno, text string) int {
	msg := append(itoa(nil, int(errno)), 0)
	_, _ = syscall.Write(Report, append(msg, text...))
	return 127
}

func itoa(b []byte, n int) []byte {
	if n >= 10 {
		b = itoa(b, n/10)
	}
	return append(b, byte('0'+n%10))
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
