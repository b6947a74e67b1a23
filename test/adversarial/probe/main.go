// Command probe is the adversarial suite's agent inside a sandbox: it attempts one operation
// per argument and prints one JSON line per attempt saying what the kernel answered. It judges
// nothing itself: the expectations live in the tests, which read these lines. It is built
// static (CGO_ENABLED=0) so it runs in any image, and every attempt that could change
// something undoes itself on success, so a hole is reported without being used.
//
//	probe OP[:ARG]...   e.g. probe create:/etc/x openw:/proc/sysrq-trigger io_uring
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Result is one attempt. Errno is the kernel's answer ("" when the operation succeeded),
// Value what it observed, Detail the full error text.
type Result struct {
	Op     string `json:"op"`
	Errno  string `json:"errno,omitempty"`
	Value  string `json:"value,omitempty"`
	Detail string `json:"detail,omitempty"`
}

type opFunc func(arg string) (string, error)

var ops = map[string]opFunc{
	// file system
	"create": create,
	"mkdir":  mkdir,
	"openw":  openWrite,
	"chmod":  chmodSame,
	"read":   readFile,
	"list":   list,
	"statfs": statfsFlags,
	"size":   fsSize,
	"exec":   execCopy,
	"mmapx":  mmapExec,
	"fill":   fill,
	"files":  manyFiles,
	"stat":   stat,
	"mknod":  mknodChar,
	// identity
	"status":  status,
	"ids":     ids,
	"runsuid": runSuid,
	// kernel surface
	"mount":         mountTmpfs,
	"unshare":       unshareChild,
	"clone-newuser": cloneNewUser,
	"clone3":        clone3,
	"keyctl":        keyctl,
	"bpf":           bpfMapCreate,
	"perf":          perfEventOpen,
	"io_uring":      ioUringSetup,
	"chroot":        chrootChild,
	"socket":        rawSocket,
	// network
	"ifaces":  ifaces,
	"dns":     dns,
	"connect": connect,
	// host
	"mounts":  mounts,
	"env":     env,
	"environ": environNames,
	// helpers for the tests
	"noop": func(string) (string, error) { return "", nil },
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "ids" {
		// The setuid copy runs this: print ids as plain text for runsuid.
		v, _ := ids("")
		fmt.Println(v)
		return
	}
	enc := json.NewEncoder(os.Stdout)
	for _, spec := range os.Args[1:] {
		name, arg, _ := strings.Cut(spec, ":")
		res := Result{Op: spec}
		f, ok := ops[name]
		if !ok {
			res.Errno, res.Detail = "unknown-op", "the probe has no operation "+name
		} else {
			v, err := f(arg)
			res.Value = v
			if err != nil {
				res.Errno, res.Detail = errnoName(err), err.Error()
			}
		}
		_ = enc.Encode(res)
	}
}

// errnoName is the symbol of the errno inside err (EROFS), or "error" when there is none.
func errnoName(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return "errno" + strconv.Itoa(int(e))
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		// The resolver does not always wrap the dial error; its text names the cause.
		for _, e := range []syscall.Errno{unix.ENETUNREACH, unix.ECONNREFUSED, unix.EHOSTUNREACH} {
			if strings.Contains(dnsErr.Err, e.Error()) {
				return unix.ErrnoName(e)
			}
		}
		switch {
		case dnsErr.IsTimeout:
			return "timeout"
		case dnsErr.IsNotFound:
			return "notfound"
		}
	}
	return "error"
}

// firstExisting picks the first of alternatives separated by | that exists, so one spec
// covers cgroup v1 and v2 layouts.
func firstExisting(arg string) string {
	alts := strings.Split(arg, "|")
	for _, p := range alts {
		if _, err := os.Lstat(p); err == nil {
			return p
		}
	}
	return alts[0]
}

func create(p string) (string, error) {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	return "created", os.Remove(p)
}

func mkdir(p string) (string, error) {
	if err := unix.Mkdir(p, 0o755); err != nil {
		return "", err
	}
	return "created", unix.Rmdir(p)
}

// openWrite opens an existing file for writing without truncating it and writes nothing.
func openWrite(arg string) (string, error) {
	p := firstExisting(arg)
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return p, err
	}
	unix.Close(fd)
	return p + " opened for writing", nil
}

// chmodSame sets a path's mode to what it already is: a write to the inode that changes nothing.
func chmodSame(p string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return "", err
	}
	return "", unix.Chmod(p, st.Mode&0o7777)
}

func readFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	n, err := io.Copy(io.Discard, io.LimitReader(f, 1<<20))
	return strconv.FormatInt(n, 10), err
}

func list(p string) (string, error) {
	ents, err := os.ReadDir(p)
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " "), err
}

// statfsFlags lists the mount flags that matter here: ro, nosuid, nodev, noexec.
func statfsFlags(p string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return "", err
	}
	var flags []string
	for _, f := range []struct {
		bit  int64
		name string
	}{{unix.ST_RDONLY, "ro"}, {unix.ST_NOSUID, "nosuid"}, {unix.ST_NODEV, "nodev"}, {unix.ST_NOEXEC, "noexec"}} {
		if st.Flags&f.bit != 0 {
			flags = append(flags, f.name)
		}
	}
	if len(flags) == 0 {
		return "rw", nil
	}
	return strings.Join(flags, ","), nil
}

// fsSize is the total size of the file system holding p, in bytes.
func fsSize(p string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return "", err
	}
	return strconv.FormatUint(st.Blocks*uint64(st.Bsize), 10), nil
}

// execCopy copies the probe into dir and tries to run the copy.
func execCopy(dir string) (string, error) {
	p := filepath.Join(dir, "probe-exec-copy")
	if err := copySelf(p); err != nil {
		return "copy failed", err
	}
	defer os.Remove(p)
	if err := exec.Command(p, "noop").Run(); err != nil {
		return "copied", err
	}
	return "ran", nil
}

// mmapExec maps a file of dir with PROT_EXEC, which is what a dynamic loader does; noexec
// must refuse it too, or "ld.so /tmp/x" would run what exec refuses.
func mmapExec(dir string) (string, error) {
	p := filepath.Join(dir, "probe-mmap")
	if err := os.WriteFile(p, make([]byte, 4096), 0o755); err != nil {
		return "write failed", err
	}
	defer os.Remove(p)
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	if err != nil {
		return "", err
	}
	return "mapped", unix.Munmap(b)
}

func copySelf(dst string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// fill writes zeros to PATH until the write fails or MAX bytes are written, reports how many
// bytes it wrote, and removes the file. Arg: PATH,MAX.
func fill(arg string) (string, error) {
	p, maxText, _ := strings.Cut(arg, ",")
	limit, err := strconv.ParseInt(maxText, 10, 64)
	if err != nil {
		return "", fmt.Errorf("fill %q: want PATH,MAXBYTES", arg)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	defer os.Remove(p)
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for n < limit {
		chunk := buf[:min(int64(len(buf)), limit-n)]
		w, err := f.Write(chunk)
		n += int64(w)
		if err != nil {
			return strconv.FormatInt(n, 10), err
		}
	}
	return strconv.FormatInt(n, 10), f.Sync()
}

// manyFiles creates N empty files in DIR, counts them back, and removes them. Arg: DIR,N.
func manyFiles(arg string) (string, error) {
	dir, nText, _ := strings.Cut(arg, ",")
	n, err := strconv.Atoi(nText)
	if err != nil {
		return "", fmt.Errorf("files %q: want DIR,N", arg)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	for i := range n {
		fd, err := unix.Open(filepath.Join(dir, strconv.Itoa(i)), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return strconv.Itoa(i), err
		}
		unix.Close(fd)
	}
	ents, err := os.ReadDir(dir)
	return strconv.Itoa(len(ents)), err
}

func stat(p string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("mode=%o uid=%d gid=%d", st.Mode&0o7777, st.Uid, st.Gid), nil
}

// mknodChar tries to create /dev/null's twin at p.
func mknodChar(p string) (string, error) {
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		return "", err
	}
	return "created", os.Remove(p)
}

// status returns a line of /proc/self/status, such as "CapEff:\t0000000000000000".
func status(field string) (string, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %s in /proc/self/status", field)
}

func ids(string) (string, error) {
	groups, _ := unix.Getgroups()
	sort.Ints(groups)
	return fmt.Sprintf("uid=%d euid=%d gid=%d egid=%d groups=%v", unix.Getuid(), unix.Geteuid(), unix.Getgid(), unix.Getegid(), groups), nil
}

// runSuid runs p (a setuid-root copy of the probe) and returns the ids it reports.
func runSuid(p string) (string, error) {
	out, err := exec.Command(p, "ids").Output()
	return strings.TrimSpace(string(out)), err
}

func mountTmpfs(string) (string, error) {
	dir, err := os.MkdirTemp("", "probe-mnt")
	if err != nil {
		return "", err
	}
	defer os.Remove(dir)
	if err := unix.Mount("probe", dir, "tmpfs", 0, "size=1m"); err != nil {
		return "", err
	}
	return "mounted", unix.Unmount(dir, unix.MNT_DETACH)
}

// childWith starts the probe again as a child with attr and reports how that went. The
// namespace operations must run in a fresh single-threaded child: the kernel refuses
// unshare(CLONE_NEWUSER) to any multi-threaded process (every Go program) with EINVAL,
// which would hide the answer that matters.
func childWith(attr *syscall.SysProcAttr) (string, error) {
	cmd := exec.Command("/proc/self/exe", "noop")
	cmd.SysProcAttr = attr
	if err := cmd.Run(); err != nil {
		return "", err
	}
	return "child ran", nil
}

func unshareChild(which string) (string, error) {
	flags := map[string]uintptr{"user": unix.CLONE_NEWUSER, "mount": unix.CLONE_NEWNS, "net": unix.CLONE_NEWNET,
		"pid": unix.CLONE_NEWPID, "uts": unix.CLONE_NEWUTS, "ipc": unix.CLONE_NEWIPC, "cgroup": unix.CLONE_NEWCGROUP}
	f, ok := flags[which]
	if !ok {
		return "", fmt.Errorf("unshare %q: want one of user, mount, net, pid, uts, ipc, cgroup", which)
	}
	return childWith(&syscall.SysProcAttr{Unshareflags: f})
}

func cloneNewUser(string) (string, error) {
	return childWith(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER})
}

// clone3 asks whether clone3 reaches the kernel at all, without creating a process: with a
// zero-sized argument the kernel answers EINVAL, while a filter that blocks it answers first.
// Seccomp cannot inspect clone3's flags (they sit behind a pointer), so a reachable clone3
// would be a way around the clone flag filter.
func clone3(string) (string, error) {
	_, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	if e != 0 {
		return "", e
	}
	return "reached", nil
}

func keyctl(string) (string, error) {
	id, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
	if err != nil {
		return "", err
	}
	return "keyring " + strconv.Itoa(id), nil
}

// bpfMapCreate asks for the smallest array map.
func bpfMapCreate(string) (string, error) {
	var attr [5]uint32 // map_type, key_size, value_size, max_entries, map_flags
	attr[0], attr[1], attr[2], attr[3] = unix.BPF_MAP_TYPE_ARRAY, 4, 4, 1
	fd, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e != 0 {
		return "", e
	}
	unix.Close(int(fd))
	return "map created", nil
}

func perfEventOpen(string) (string, error) {
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	return "event opened", nil
}

func ioUringSetup(string) (string, error) {
	var params [120]byte // struct io_uring_params, zeroed
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
	if e != 0 {
		return "", e
	}
	unix.Close(int(fd))
	return "ring created", nil
}

// chrootChild tries chroot in a child, so a success would not change the probe's own root.
func chrootChild(string) (string, error) {
	return childWith(&syscall.SysProcAttr{Chroot: "/"})
}

func rawSocket(kind string) (string, error) {
	var fd int
	var err error
	switch kind {
	case "raw":
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	case "packet":
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	default:
		return "", fmt.Errorf("socket %q: want raw or packet", kind)
	}
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	return "socket opened", nil
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

func ifaces(string) (string, error) {
	list, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(list))
	for _, i := range list {
		names = append(names, i.Name)
	}
	sort.Strings(names)
	return strings.Join(names, " "), nil
}

// onlyLoopback guards the network probes: if a way out existed, they must not use it.
func onlyLoopback() error {
	list, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, i := range list {
		if i.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("not attempted: interface %s is not loopback, and the suite never sends traffic out", i.Name)
		}
	}
	return nil
}

// dns looks a name up with the resolver every static binary uses, bounded by 10 s, and
// reports how long it took.
func dns(name string) (string, error) {
	if err := onlyLoopback(); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		return "took " + took.String(), err
	}
	return strings.Join(addrs, " "), nil
}

func connect(addr string) (string, error) {
	if err := onlyLoopback(); err != nil {
		return "", err
	}
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		return "took " + took.String(), err
	}
	c.Close()
	return "connected", nil
}

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Point  string `json:"point"`
	Root   string `json:"root"` // the path inside the mounted file system
	FSType string `json:"fstype"`
	Source string `json:"source"`
}

func mounts(string) (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	var out []Mount
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			return "", fmt.Errorf("unreadable mountinfo line %q", line)
		}
		out = append(out, Mount{Point: unescape(f[4]), Root: unescape(f[3]), FSType: g[0], Source: unescape(g[1])})
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// env reports a variable as "unset" or "set=VALUE".
func env(name string) (string, error) {
	if v, ok := os.LookupEnv(name); ok {
		return "set=" + v, nil
	}
	return "unset", nil
}

// environNames lists every variable as NAME=VALUE; the tests look for host values in it.
func environNames(string) (string, error) {
	vars := os.Environ()
	sort.Strings(vars)
	b, err := json.Marshal(vars)
	return string(b), err
}
