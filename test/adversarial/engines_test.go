package adversarial_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/system"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/engine"
)

// enginesGroup counts the engine matrix's cases.
var enginesGroup = &group{name: "engine matrix"}

func init() { groups = append(groups, enginesGroup) }

// matrixEngine is one engine scripts/test-engines.sh brought up beside the system dockerd.
type matrixEngine struct {
	name, host string
	// user runs sbx: root for a rootful engine, the owner of a rootless one.
	user string
}

// matrixEngines reads the engines test-engines.sh listed; without them the matrix is
// skipped, unless SBX_REQUIRE_ENGINES=1 (as in make test), where it fails.
func matrixEngines(t *testing.T) []matrixEngine {
	t.Helper()
	path := os.Getenv("SBX_TEST_ENGINES_FILE")
	if path == "" {
		path = "/run/sbx-test/engines"
	}
	f, err := os.Open(path)
	if err != nil {
		testenv.Missing(t, "SBX_REQUIRE_ENGINES", "no engine matrix here (bash scripts/test-engines.sh brings it up): %v", err)
		return nil
	}
	defer f.Close()
	var out []matrixEngine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			t.Fatalf("%s: line %q is not NAME HOST USER", path, sc.Text())
		}
		out = append(out, matrixEngine{name: fields[0], host: fields[1], user: fields[2]})
	}
	if err := sc.Err(); err != nil || len(out) == 0 {
		t.Fatalf("%s lists no engine: %v", path, err)
	}
	return out
}

// TestEngineMatrix holds sbx's promises on every engine the matrix brought up (rootful
// Podman, rootless Podman, rootless Docker; the system dockerd runs the rest of the suite):
// what a user does first (exec, exit codes, stdin, timeouts, cp both ways), the workspace
// modes that write to the host (rw, overlay: the files are the invoking user's), the egress
// allowlist, the limits (enforced, or create refused unless the user's own config accepts
// that), and the hardening, probed from inside as the default sandbox is probed. Not the
// whole suite: each of these is a guarantee that depends on the engine.
func TestEngineMatrix(t *testing.T) {
	for _, e := range matrixEngines(t) {
		t.Run(e.name, func(t *testing.T) { engineMatrix(t, e) })
	}
}

func engineMatrix(t *testing.T, e matrixEngine) {
	sc := enginesGroup.start(t)
	ctx := context.Background()
	ep, err := engine.ResolveEndpoint(func(k string) string {
		if k == "DOCKER_HOST" {
			return e.host
		}
		return ""
	}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Connect(ctx, ep, nil)
	if err != nil {
		t.Fatalf("%s at %s: %v", e.name, e.host, err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	kind, err := engine.DetectKind(ctx, eng)
	if err != nil {
		t.Fatal(err)
	}
	info, err := eng.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s is %s", e.name, kind)

	var s *clitest.CLI
	uid, gid := 0, 0
	if n, err := strconv.Atoi(e.user); err == nil {
		// A user in the docker group, whose group may use the rootful engine's socket.
		s = clitest.NewAs(t, run, eng, n)
		s.Env = append(s.Env, "DOCKER_HOST="+e.host)
		uid, gid = n, n
	} else if e.user == "root" {
		s = clitest.New(t, run, eng, e.host)
	} else {
		u, err := user.Lookup(e.user)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		s = clitest.NewAsOn(t, run, eng, e.host, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)})
	}
	// This machine's quirk, not Podman's: root here lacks CAP_SYS_RESOURCE, and Podman raises
	// nofile and nproc to its defaults unless both are given within the hard limits.
	conf := ""
	if kind.Product == engine.ProductPodman {
		conf = "ulimits: {nproc: \"4096:4096\", nofile: \"4096:4096\"}\n"
	}
	writeUserConfig(t, s, conf)
	step := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			sc.case_(t)
			f(t)
		})
	}
	name := func(suffix string) string { return sandboxName(e.name + "-" + suffix) }

	limits := engine.LimitsProblem(kind, info)
	if limits != "" {
		step("create refused where limits cannot hold", func(t *testing.T) {
			r := s.Run("create", "-n", name("limits"))
			if r.Code != 125 || !strings.Contains(r.Stderr, "cannot apply memory, CPU or pids limits") || !strings.Contains(r.Stderr, "dangerouslyAllowUnenforcedLimits: true in your own config") {
				t.Errorf("create on %s: want 125 naming the limits and the user's way out: %s", kind, r)
			}
			if r := s.Run("doctor"); r.Code == 0 || !strings.Contains(r.Stdout+r.Stderr, "limits") {
				t.Errorf("doctor on %s passes: %s", kind, r)
			}
		})
		conf += "dangerouslyAllowUnenforcedLimits: true\n"
		writeUserConfig(t, s, conf)
		step("accepted limits reported missing", func(t *testing.T) { limitsMissing(t, s, name("limits"), kind) })
	} else {
		step("limits enforced inside", func(t *testing.T) { limitsInside(t, s, name("limits"), info) })
	}

	step("exec", func(t *testing.T) {
		if r := s.Run("exec", "--", "python3", "-c", "print(6*7)"); r.Code != 0 || r.Stdout != "42\n" {
			t.Errorf("python3 6*7: %s", r)
		}
		if r := s.Run("exec", "--", "sh", "-c", "exit 3"); r.Code != 3 {
			t.Errorf("exit 3: %s", r)
		}
		if r := s.Run("exec", "--", "no-such-command"); r.Code != 127 {
			t.Errorf("a missing command: %s", r)
		}
		cmd := s.Cmd("exec", "-i", "--", "wc", "-l")
		cmd.Stdin = strings.NewReader("a\nb\nc\n")
		if r := s.RunIn(cmd); r.Code != 0 || strings.TrimSpace(r.Stdout) != "3" {
			t.Errorf("stdin: %s", r)
		}
		if r := s.Run("exec", "--timeout", "1s", "--", "sleep", "30"); r.Code != 124 {
			t.Errorf("--timeout 1s: %s", r)
		}
	})

	step("cp both ways", func(t *testing.T) {
		sb := name("cp")
		if r := s.Run("create", "-n", sb); r.Code != 0 {
			t.Fatalf("create: %s", r)
		}
		in := filepath.Join(s.Home, "in.txt")
		if err := os.WriteFile(in, []byte("into the sandbox\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.Chown(in)
		if r := s.Run("cp", in, sb+":/tmp/in.txt"); r.Code != 0 {
			t.Fatalf("cp in: %s", r)
		}
		if r := s.Run("exec", "-n", sb, "--", "sh", "-c", "cat /tmp/in.txt; echo out of it > /tmp/out.txt"); r.Stdout != "into the sandbox\n" {
			t.Errorf("the copied file inside: %s", r)
		}
		out := filepath.Join(s.Home, "out.txt")
		if r := s.Run("cp", sb+":/tmp/out.txt", out); r.Code != 0 {
			t.Fatalf("cp out: %s", r)
		}
		if b, err := os.ReadFile(out); err != nil || string(b) != "out of it\n" {
			t.Errorf("the copied file on the host: %q %v", b, err)
		}
		ownedBy(t, out, uid, gid)
	})

	// What sbx cannot yet make hold there is refused at create, naming the engine.
	refused := func(t *testing.T, why string, args ...string) {
		t.Helper()
		r := s.Run(append([]string{"create", "-n", name("refused")}, args...)...)
		if r.Code != 125 || !strings.Contains(r.Stderr, kind.String()) || !strings.Contains(r.Stderr, why) || !strings.Contains(r.Stderr, "hint: ") {
			t.Errorf("create %v on %s: want 125 saying %q: %s", args, kind, why, r)
		}
		if len(s.Containers(name("refused"))) != 0 {
			t.Errorf("a refused create left a container")
		}
	}
	rwOverlay(t, s, step, name, uid, gid)
	if kind.Rootless {
		// Only the engine's user is mapped to itself.
		step("rw as another user refused", func(t *testing.T) {
			for _, ws := range []string{"rw", "overlay"} {
				refused(t, "is not the engine's user", "--workspace", ws, "--user", "1234:1234")
			}
		})
	}
	step("egress allowlist", func(t *testing.T) { egressAllowlist(t, s, name("egress"), kind) })

	step("probes from inside", func(t *testing.T) {
		installProbe(t, s.Project, "probe", 0o755)
		sb := name("probes")
		if r := s.Run("create", "-n", sb); r.Code != 0 {
			t.Fatalf("create: %s", r)
		}
		cases := filesystemProbes(info.CgroupVersion == "2")
		cases = append(cases, identityProbes(false)...)
		cases = append(cases, kernelProbes()...)
		cases = append(cases, networkProbes()...)
		if kind.Rootless {
			cases = underUserNamespace(cases)
		}
		results := probeAs(t, s, sb, cases)
		var failed []string
		for _, c := range cases {
			if c.cannot != "" || c.needs != "" && hostLacks(t, c.needs) {
				continue
			}
			if err := c.judge(results[c.user][c.op]); err != nil {
				failed = append(failed, c.label()+": "+err.Error())
			}
		}
		if len(failed) > 0 {
			t.Errorf("%d of %d probes failed on %s:\n%s", len(failed), len(cases), kind, strings.Join(failed, "\n"))
		}
	})
}

// underUserNamespace adapts the probes to a rootless engine: the host's root files are
// owned by a uid outside the engine's user namespace, so root without capabilities is
// refused by their permissions (EACCES) before the read-only mount (EROFS) is asked.
func underUserNamespace(cases []expect) []expect {
	for i, c := range cases {
		if c.user == rootNoCaps && strings.HasPrefix(c.op, "openw:") && slices.Equal(c.errno, []string{"EROFS"}) {
			cases[i].errno = []string{"EROFS", "EACCES"}
		}
	}
	return cases
}

// rwOverlay holds that rw and overlay workspaces write to the host as uid:gid.
func rwOverlay(t *testing.T, s *clitest.CLI, step func(string, func(*testing.T)), name func(string) string, uid, gid int) {
	step("rw writes as the invoking user", func(t *testing.T) {
		sb := name("rw")
		if r := s.Run("create", "-n", sb, "--workspace", "rw"); r.Code != 0 {
			t.Fatalf("create: %s", r)
		}
		if r := s.Run("exec", "-n", sb, "--", "sh", "-c", "mkdir -p d && echo rw > d/rw.txt"); r.Code != 0 {
			t.Fatalf("write: %s", r)
		}
		p := filepath.Join(s.Project, "d", "rw.txt")
		if b, err := os.ReadFile(p); err != nil || string(b) != "rw\n" {
			t.Fatalf("the sandbox's file on the host: %q %v", b, err)
		}
		ownedBy(t, p, uid, gid)
		ownedBy(t, filepath.Dir(p), uid, gid)
	})

	step("overlay writes as the invoking user once applied", func(t *testing.T) {
		sb := name("overlay")
		s.Write("kept.txt", "project\n")
		if r := s.Run("create", "-n", sb, "--workspace", "overlay"); r.Code != 0 {
			t.Fatalf("create: %s", r)
		}
		if r := s.Run("exec", "-n", sb, "--", "sh", "-c", "mkdir -p o && echo overlay > o/new.txt && echo changed > kept.txt"); r.Code != 0 {
			t.Fatalf("write: %s", r)
		}
		if b, _ := os.ReadFile(filepath.Join(s.Project, "kept.txt")); string(b) != "project\n" {
			t.Fatalf("the overlay wrote through to the project: %q", b)
		}
		if r := s.Run("diff", "-n", sb, "--name-only"); r.Code != 0 || r.Stdout != "kept.txt\no\no/new.txt\n" {
			t.Errorf("diff --name-only: %s", r)
		}
		if r := s.Run("apply", "-n", sb, "--yes"); r.Code != 0 {
			t.Fatalf("apply: %s", r)
		}
		for p, want := range map[string]string{"o/new.txt": "overlay\n", "kept.txt": "changed\n"} {
			full := filepath.Join(s.Project, p)
			if b, err := os.ReadFile(full); err != nil || string(b) != want {
				t.Errorf("%s after apply: %q %v", p, b, err)
			}
			ownedBy(t, full, uid, gid)
		}
	})

}

// egressAllowlist holds that sandbox sb reaches an allowed name through the proxy and no other.
func egressAllowlist(t *testing.T, s *clitest.CLI, sb string, kind engine.Kind) {
	if r := s.Run("create", "-n", sb, "--egress", "deb.debian.org"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	code := func(url string) clitest.Result {
		return s.Run("exec", "-n", sb, "--", "curl", "-sS", "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code}", url)
	}
	if r := code("http://deb.debian.org/debian/dists/bookworm/Release"); r.Stdout != "200" {
		t.Errorf("the allowed name: %s", r)
	}
	if r := code("http://registry.npmjs.org/"); r.Stdout != "403" {
		t.Errorf("a name the allowlist lacks: %s", r)
	}
	if r := s.Run("exec", "-n", sb, "--", "getent", "hosts", "deb.debian.org"); r.Code == 0 {
		t.Errorf("a name resolves inside, beside the proxy: %s", r)
	}
	// Past the proxy nothing answers: not its network's gateway address (this machine's, where
	// an engine gives it one), not an address beyond it (TEST-NET-1, which no network routes).
	// A refused connection would mean a host there answered.
	const connect = `import errno, os, socket, sys
host = sys.argv[1] if sys.argv[1] != "gateway" else os.environ["HTTP_PROXY"].split("//")[1].rsplit(".", 1)[0] + ".1"
s = socket.socket()
s.settimeout(5)
try:
    s.connect((host, 80))
    print("connected")
except socket.timeout:
    print("ETIMEDOUT")
except OSError as e:
    print(errno.errorcode[e.errno])
`
	if kind.Product == engine.ProductPodman && !kind.Rootless {
		// Of its egress directory the sandbox sees the proxy's socket alone, read-only: not
		// the log, not the rules, nothing to replace the socket with.
		r := s.Run("exec", "-n", sb, "--", "sh", "-c", "ls -A /run/sbx-egress; rm -f /run/sbx-egress/proxy.sock; touch /run/sbx-egress/x; echo rc=$?")
		if r.Stdout != "proxy.sock\nrc=1\n" || strings.Count(r.Stderr, "Read-only file system") != 2 {
			t.Errorf("the proxy's socket directory inside: %s", r)
		}
		// The sandbox has no network, only its loopback, where its agent relays to the
		// proxy's socket: no address of this machine's, nor any other, has a route.
		hosts := []string{"192.0.2.1"}
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				hosts = append(hosts, ipn.IP.String())
			}
		}
		for _, host := range hosts {
			r := s.Run("exec", "-n", sb, "--", "python3", "-c", connect, host)
			if got := strings.TrimSpace(r.Stdout); got != "ENETUNREACH" {
				t.Errorf("%s port 80 from a sandbox with no network: want ENETUNREACH: %s", host, r)
			}
		}
		return
	}
	for _, host := range []string{"gateway", "192.0.2.1"} {
		r := s.Run("exec", "-n", sb, "--", "python3", "-c", connect, host)
		if got := strings.TrimSpace(r.Stdout); got != "EHOSTUNREACH" && got != "ETIMEDOUT" && got != "ENETUNREACH" {
			t.Errorf("%s port 80 past the proxy: want no host there (EHOSTUNREACH, ETIMEDOUT, ENETUNREACH): %s", host, r)
		}
	}
}

// hostLacks reports whether this kernel lacks what operation op needs, as the host answers it.
func hostLacks(t *testing.T, op string) bool {
	switch hostProbe(t, op).Errno {
	case "ENOSYS", "ENOENT", "EINVAL":
		return true
	}
	return false
}

// limitsInside creates sandbox name with limits and reads them from its own cgroup.
func limitsInside(t *testing.T, s *clitest.CLI, name string, info system.Info) {
	if r := s.Run("create", "-n", name, "--memory", "256m", "--pids-limit", "64", "--cpus", "0.5"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	files := map[string]string{
		"/sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456",
		"/sys/fs/cgroup/pids/pids.max":                "64",
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":         "50000",
	}
	if info.CgroupVersion == "2" {
		files = map[string]string{"/sys/fs/cgroup/memory.max": "268435456", "/sys/fs/cgroup/pids.max": "64", "/sys/fs/cgroup/cpu.max": "50000 100000"}
	}
	for f, want := range files {
		if r := s.Run("exec", "-n", name, "--", "cat", f); strings.TrimSpace(r.Stdout) != want {
			t.Errorf("%s inside: %s, want %s", f, r, want)
		}
	}
}

// limitsMissing creates sandbox name with limits on an engine that cannot apply them, the
// user having accepted that: the create says which are missing, as the engine's inspect
// shows them (Podman drops them) or, where inspect keeps them, as the agent reads its cgroup.
func limitsMissing(t *testing.T, s *clitest.CLI, name string, kind engine.Kind) {
	r := s.Run("create", "-n", name, "--memory", "256m", "--pids-limit", "64", "--cpus", "0.5")
	// Rootless Docker on v1 shows the host's root memory and cpu cgroups, and a pids
	// directory without pids.max: that limit is unknown to the agent.
	want := kind.String() + " did not apply the sandbox's limits, its agent read in its cgroup: memory (asked 268435456 bytes, the cgroup has none), cpus (asked 0.5, the cgroup has none); it runs without them"
	if kind.Product == engine.ProductPodman {
		want = kind.String() + " did not apply the sandbox's limits: memory (asked 268435456, the engine set 0)"
	}
	if r.Code != 0 || !strings.Contains(r.Stderr, want) {
		t.Errorf("create with limits on %s: want a warning %q: %s", kind, want, r)
	}
}

// writeUserConfig makes content the user's own sbx config file.
func writeUserConfig(t *testing.T, s *clitest.CLI, content string) {
	t.Helper()
	dir := filepath.Join(s.Home, ".config", "sbx")
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		s.Chown(d)
	}
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Chown(p)
}

// ownedBy fails t unless p belongs to uid:gid on the host.
func ownedBy(t *testing.T, p string, uid, gid int) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("%s belongs to %d:%d on the host, not to the invoking user %d:%d", p, st.Uid, st.Gid, uid, gid)
	}
}
