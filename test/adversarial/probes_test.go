package adversarial_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Who a probe runs as. The sandbox user is the default; root without capabilities is what
// "sbx exec -u 0" gives, and it shows which refusals come from the mount alone: root owns
// the system files, so permission checks pass and only a read-only mount can answer.
const (
	sandboxUser = ""
	rootNoCaps  = "0:0"
)

// expect is one probe and the kernel's answer the suite requires.
type expect struct {
	area  string // filesystem, identity, kernel surface, network, host
	name  string
	op    string // the probe operation, see ./probe
	user  string
	errno []string // accepted refusals; empty means the operation must succeed
	value string   // when set, the exact value wanted from a successful operation
	// check, when set, replaces errno and value.
	check func(r probeResult) error
	// cannot, when set, is why this host cannot run the case at all.
	cannot string
	// needs is a probe operation run on the host first: when the host's kernel answers it
	// with ENOSYS or ENOENT (or EINVAL for a namespace it was built without), the kernel
	// lacks the feature and the case cannot run here.
	needs string
}

func (e expect) label() string {
	who := "uid 1000"
	if e.user == rootNoCaps {
		who = "root without capabilities"
	}
	return e.area + "/" + e.name + " (" + who + ")"
}

func (e expect) judge(r probeResult) error {
	switch {
	case r.Op == "":
		return fmt.Errorf("the probe printed no result for %s", e.op)
	case e.check != nil:
		return e.check(r)
	case len(e.errno) > 0 && r.Errno == "":
		return fmt.Errorf("%s SUCCEEDED (%s); want it refused with %s", e.op, r.Value, strings.Join(e.errno, " or "))
	case len(e.errno) > 0 && !slices.Contains(e.errno, r.Errno):
		return fmt.Errorf("%s refused for the wrong reason: %s (%s); want %s", e.op, r.Errno, r.Detail, strings.Join(e.errno, " or "))
	case len(e.errno) == 0 && r.Errno != "":
		return fmt.Errorf("%s failed: %s (%s)", e.op, r.Errno, r.Detail)
	case e.value != "" && r.Value != e.value:
		return fmt.Errorf("%s: got %q, want %q", e.op, r.Value, e.value)
	}
	return nil
}

// zeroCaps is the value of every capability set line when nothing is held.
const zeroCaps = "0000000000000000"

// TestProbesFromInside asks the kernel from inside a sandbox at each isolation level; where
// gVisor's kernel answers otherwise than Linux, the case says what each level must answer.
func TestProbesFromInside(t *testing.T) {
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) { probesFromInside(t, iso, false) })
	}
	// A sandbox taken from the pool must hold as one created for the command does, and answer
	// every probe as a created sandbox of the same configuration does.
	t.Run("claimed", func(t *testing.T) { probesFromInside(t, config.IsolationContainer, true) })
}

// probeWorkspace is where a sandbox's /workspace comes from, as its mount table shows it:
// the project's directory, or for workspace none, the sandbox's volume.
type probeWorkspace func(root string) bool

func probesFromInside(t *testing.T, iso string, claimed bool) {
	sc := probesGroups[iso].start(t)
	if claimed {
		sc = claimedGroup.start(t)
	}
	s := newSBX(t)
	ctx := context.Background()
	install := func(dir string) {
		installProbe(t, dir, "probe", 0o755)
		// The test runs as root on the host, so it can make what uid 1000 cannot make inside: a
		// setuid-root binary, visible at /workspace/suid-probe.
		if os.Geteuid() == 0 {
			installProbe(t, dir, "suid-probe", 0o4755)
		}
	}
	if !claimed {
		install(s.Project)
	}
	if os.Getenv("DOCKER_HOST") == "" {
		// Set it explicitly, so a leak of the caller's engine address would be visible inside.
		home, _ := os.UserHomeDir()
		if ep, err := engine.ResolveEndpoint(os.Getenv, home, ""); err == nil {
			s.Env = append(s.Env, "DOCKER_HOST="+ep.Host)
		}
	}
	name := sandboxName("probes-" + iso)
	key := name // what its volume and agent directory are named after
	workspace := probeWorkspace(func(root string) bool { return strings.HasSuffix(s.Project, root) })
	fresh := ""
	if claimed {
		name, fresh = sandboxName("probes-claimed"), sandboxName("probes-created")
		key = claimedSandbox(t, s, name, fresh)
		// Through the host, as the test runs as root: sbx cp would not keep a setuid bit.
		install(volumePath(t, s, sandbox.VolumeName(key)))
		install(volumePath(t, s, sandbox.VolumeName(fresh)))
		workspace = func(root string) bool { return strings.HasSuffix(root, "/volumes/"+sandbox.VolumeName(key)+"/_data") }
	} else if r := s.Run("create", "-n", name, "--isolation", iso); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	info, err := s.Eng.ContainerInspect(ctx, sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	cgroupV2 := false
	if sys, err := s.Eng.Info(ctx); err == nil {
		cgroupV2 = sys.CgroupVersion == "2"
	}

	cases := filesystemProbes(cgroupV2)
	cases = append(cases, identityProbes(os.Geteuid() == 0)...)
	cases = append(cases, kernelProbes()...)
	cases = append(cases, networkProbes()...)
	cases = append(cases, hostProbes(s, info.ID, filepath.Join(s.Home, ".state", "sbx", "agent", key), iso, workspace)...)
	if iso == config.IsolationGVisor {
		cases = underGVisor(t, cases)
	}

	results := probeAs(t, s, name, cases)
	var created map[string]map[string]probeResult
	if claimed {
		created = probeAs(t, s, fresh, cases)
	}

	hostAnswers := map[string]probeResult{}
	for _, c := range cases {
		t.Run(c.label(), func(t *testing.T) {
			sc.case_(t)
			if c.cannot != "" {
				cannotRun(t, "%s", c.cannot)
			}
			if c.needs != "" {
				h, ok := hostAnswers[c.needs]
				if !ok {
					h = hostProbe(t, c.needs)
					hostAnswers[c.needs] = h
				}
				if slices.Contains([]string{"ENOSYS", "ENOENT", "EINVAL"}, h.Errno) {
					cannotRun(t, "this kernel lacks it: %s on the host answers %s (%s)", c.needs, h.Errno, h.Detail)
				}
			}
			got := results[c.user][c.op]
			if claimed {
				// The mount table names the container and the volume, which differ (the
				// case's own check judges it); a refusal's value says how long it took.
				want := created[c.user][c.op]
				if c.op != "mounts" && (got.Errno != want.Errno || (got.Errno == "" && got.Value != want.Value)) {
					t.Errorf("%s: the claimed sandbox answers %+v, a created one %+v", c.op, got, want)
				}
				if workspaceMode[c.op] {
					return // what the created sandbox answers, checked above: workspace none is no read-only bind
				}
			}
			if err := c.judge(got); err != nil {
				t.Error(err)
			}
		})
	}
}

// probeAs runs /workspace/probe in sandbox name with the operations of cases, as the sandbox
// user and as root without capabilities, and returns the answers by user and operation.
func probeAs(t *testing.T, s *clitest.CLI, name string, cases []expect) map[string]map[string]probeResult {
	t.Helper()
	results := map[string]map[string]probeResult{}
	for _, user := range []string{sandboxUser, rootNoCaps} {
		var ops []string
		for _, c := range cases {
			if c.user == user && !slices.Contains(ops, c.op) {
				ops = append(ops, c.op)
			}
		}
		args := []string{"exec", "-n", name}
		if user != "" {
			args = append(args, "-u", user)
		}
		r := s.Run(append(append(args, "--", "/workspace/probe"), ops...)...)
		if r.Code != 0 {
			t.Fatalf("probe as %q in %s: %s", user, name, r)
		}
		results[user] = parseProbe(t, r.Stdout)
	}
	return results
}

// workspaceMode are the probes whose answer follows from the workspace mode (ro, for the
// created sandboxes of the other levels), not from the isolation.
var workspaceMode = map[string]bool{"create:/workspace/sbx-probe": true}

// claimedSandbox makes sandbox name by taking it from the pool of a workspace-none project,
// and sandbox fresh, of the same configuration, by creating it; it returns the pool name
// name was made under.
func claimedSandbox(t *testing.T, s *clitest.CLI, name, fresh string) string {
	t.Helper()
	s.Write(".sbx.yaml", "workspace: none\n")
	created := s.In(t)
	created.Env = append(created.Env, "SBX_POOL=0")
	if r := created.Run("create", "-n", fresh); r.Code != 0 || strings.Contains(r.Stderr, "pool") {
		t.Fatalf("create %s without a pool: %s", fresh, r)
	}
	s.Env = append(s.Env, "SBX_POOL=1")
	if r := s.Run("pool", "fill"); r.Code != 0 {
		t.Fatalf("pool fill: %s", r)
	}
	r := s.Run("create", "-n", name)
	if r.Code != 0 || !strings.Contains(r.Stderr, fmt.Sprintf("sandbox %q taken from the pool", name)) {
		t.Fatalf("create %s from the pool: %s", name, r)
	}
	info, err := s.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	key := info.Config.Labels[sandbox.LabelName]
	if !strings.HasPrefix(key, sandbox.PoolPrefix) {
		t.Fatalf("sandbox %s was made as %q, not by the pool", name, key)
	}
	// The claim started a refill; wait for it, so no fill runs beside the probes and the
	// cleanup drains what it made.
	if r := s.Run("pool", "fill"); r.Code != 0 {
		t.Fatalf("pool fill: %s", r)
	}
	return key
}

// volumePath is where volume vol's files are on this machine (the engine is local).
func volumePath(t *testing.T, s *clitest.CLI, vol string) string {
	t.Helper()
	list, err := s.Eng.VolumeList(context.Background(), volume.ListOptions{Filters: filters.NewArgs(filters.Arg("name", "^"+vol+"$"))})
	if err != nil || len(list.Volumes) != 1 || list.Volumes[0].Mountpoint == "" {
		t.Fatalf("volume %s: %+v %v", vol, list.Volumes, err)
	}
	return list.Volumes[0].Mountpoint
}

func filesystemProbes(cgroupV2 bool) []expect {
	fs := func(name, op, user string, errno ...string) expect {
		return expect{area: "filesystem", name: name, op: op, user: user, errno: errno}
	}
	var out []expect
	for _, user := range []string{sandboxUser, rootNoCaps} {
		out = append(out,
			// To create a file or directory the kernel asks the mount for write access before
			// it checks the directory's permissions, so even uid 1000 hears EROFS for the
			// root-owned /, /etc and /usr: the reason is the read-only root, not ownership.
			fs("create in /", "create:/sbx-probe", user, "EROFS"),
			fs("mkdir in /", "mkdir:/sbx-probe", user, "EROFS"),
			fs("create in /etc", "create:/etc/sbx-probe", user, "EROFS"),
			fs("create in /usr", "create:/usr/sbx-probe", user, "EROFS"),
			fs("create in /workspace (read-only bind)", "create:/workspace/sbx-probe", user, "EROFS"),
			fs("/tmp is writable", "create:/tmp/sbx-probe", user),
			fs("/var/tmp is writable", "create:/var/tmp/sbx-probe", user),
			// noexec refuses exec (EACCES) and a PROT_EXEC mapping (EPERM), so neither a
			// copied binary nor "ld.so /tmp/x" runs from scratch space.
			fs("/tmp is noexec: exec", "exec:/tmp", user, "EACCES"),
			fs("/tmp is noexec: mmap PROT_EXEC", "mmapx:/tmp", user, "EPERM"),
			// sysfs is a fresh mount made read-only as a whole (the superblock), which the
			// kernel checks before any permission: EROFS for every user.
			fs("write /sys/class/net/lo/mtu", "openw:/sys/class/net/lo/mtu", user, "EROFS"),
			fs("create in /sys", "create:/sys/sbx-probe", user, "EROFS"),
		)
		// An existing root-owned file is different: permissions are checked before the mount,
		// so uid 1000 hears EACCES, and only root (who owns the file, so passes the permission
		// check without any capability) reaches the read-only mount and hears EROFS.
		existing := "EACCES"
		if user == rootNoCaps {
			existing = "EROFS"
		}
		out = append(out,
			fs("write /etc/passwd", "openw:/etc/passwd", user, existing),
			fs("write /usr/bin/env", "openw:/usr/bin/env", user, existing),
			fs("write /proc/sys/kernel/core_pattern", "openw:/proc/sys/kernel/core_pattern", user, existing),
			fs("write the cgroup memory limit", "openw:/sys/fs/cgroup/memory.max|/sys/fs/cgroup/memory/memory.limit_in_bytes", user, existing),
		)
		sysrq := fs("write /proc/sysrq-trigger", "openw:/proc/sysrq-trigger", user, existing)
		sysrq.needs = "stat:/proc/sysrq-trigger"
		out = append(out, sysrq)
		if cgroupV2 {
			// Not observed on the development hosts (cgroup v1): on v2 the hierarchy itself is
			// the read-only mount at /sys/fs/cgroup.
			out = append(out, fs("mkdir in the cgroup hierarchy", "mkdir:/sys/fs/cgroup/sbx-probe", user, "EROFS"))
		} else {
			// On cgroup v1, /sys/fs/cgroup is a tmpfs the runtime leaves mode 0555, so no one
			// without CAP_DAC_OVERRIDE may add to it; the hierarchies below it are read-only
			// mounts, and mkdir asks the mount first.
			out = append(out,
				fs("mkdir in /sys/fs/cgroup", "mkdir:/sys/fs/cgroup/sbx-probe", user, "EACCES"),
				fs("mkdir in the memory cgroup hierarchy", "mkdir:/sys/fs/cgroup/memory/sbx-probe", user, "EROFS"))
		}
	}
	out = append(out,
		// /home/sandbox belongs to uid 1000 and lies on the root file system: nothing but the
		// read-only mount stands in the way.
		fs("create in the sandbox user's own home", "create:/home/sandbox/sbx-probe", sandboxUser, "EROFS"),
		fs("chmod the sandbox user's own home", "chmod:/home/sandbox", sandboxUser, "EROFS"),
		fs("chmod /usr", "chmod:/usr", rootNoCaps, "EROFS"),
		expect{area: "filesystem", name: "the root file system is mounted read-only", op: "statfs:/",
			check: flagsWant("ro")},
		expect{area: "filesystem", name: "/tmp is nosuid,nodev,noexec", op: "statfs:/tmp",
			check: flagsWant("nosuid", "nodev", "noexec")},
		expect{area: "filesystem", name: "/tmp is capped at 256 MiB", op: "size:/tmp", value: fmt.Sprint(256 << 20)},
	)
	// Masked files read as empty (a bind of /dev/null) or are denied.
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list"} {
		out = append(out, expect{area: "filesystem", name: "masked " + p, op: "read:" + p, needs: "stat:" + p,
			check: func(r probeResult) error {
				if r.Errno == "" && r.Value == "0" || r.Errno == "EACCES" || r.Errno == "EPERM" {
					return nil
				}
				return fmt.Errorf("%s is readable: %s bytes %s %s", p, r.Value, r.Errno, r.Detail)
			}})
	}
	out = append(out, expect{area: "filesystem", name: "masked /sys/firmware is empty", op: "list:/sys/firmware", value: ""})
	return out
}

// flagsWant checks that a statfs result carries every one of flags.
func flagsWant(flags ...string) func(probeResult) error {
	return func(r probeResult) error {
		if r.Errno != "" {
			return fmt.Errorf("statfs: %s", r.Detail)
		}
		have := strings.Split(r.Value, ",")
		for _, f := range flags {
			if !slices.Contains(have, f) {
				return fmt.Errorf("mount flags %q lack %s", r.Value, f)
			}
		}
		return nil
	}
}

func identityProbes(canMakeSetuid bool) []expect {
	id := func(name, op, user, value string) expect {
		return expect{area: "identity", name: name, op: op, user: user, value: value}
	}
	out := []expect{
		id("uids are 1000", "status:Uid", sandboxUser, "1000\t1000\t1000\t1000"),
		id("gids are 1000", "status:Gid", sandboxUser, "1000\t1000\t1000\t1000"),
		id("no supplementary root group", "status:Groups", sandboxUser, "1000"),
		id("no new privileges", "status:NoNewPrivs", sandboxUser, "1"),
		id("seccomp filter on", "status:Seccomp", sandboxUser, "2"),
		id("no new privileges", "status:NoNewPrivs", rootNoCaps, "1"),
		id("seccomp filter on", "status:Seccomp", rootNoCaps, "2"),
	}
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		out = append(out, id(set+" empty", "status:"+set, sandboxUser, zeroCaps), id(set+" empty", "status:"+set, rootNoCaps, zeroCaps))
	}
	if !canMakeSetuid {
		return append(out, expect{area: "identity", name: "a setuid-root binary does not raise euid", op: "noop",
			cannot: "the test does not run as root on the host, so it cannot make a setuid-root file"})
	}
	return append(out,
		// The preconditions, so the next case means something: the bit and owner reach the
		// sandbox and the workspace mount is not nosuid. What keeps euid at 1000 is then
		// no-new-privileges.
		id("the setuid-root file is visible as such", "stat:/workspace/suid-probe", sandboxUser, "mode=4755 uid=0 gid=0"),
		expect{area: "identity", name: "the workspace mount honours setuid bits", op: "statfs:/workspace",
			check: func(r probeResult) error {
				if r.Errno != "" || strings.Contains(r.Value, "nosuid") {
					return fmt.Errorf("statfs /workspace: %q %s: a nosuid mount would make the setuid case vacuous", r.Value, r.Errno)
				}
				return nil
			}},
		id("a setuid-root binary does not raise euid", "runsuid:/workspace/suid-probe", sandboxUser, "uid=1000 euid=1000 gid=1000 egid=1000 groups=[1000]"),
	)
}

func kernelProbes() []expect {
	var out []expect
	for _, user := range []string{sandboxUser, rootNoCaps} {
		k := func(name, op, needs string, errno ...string) expect {
			return expect{area: "kernel surface", name: name, op: op, user: user, errno: errno, needs: needs}
		}
		out = append(out,
			k("mount tmpfs", "mount", "", "EPERM"),
			// Namespaces are tried in a fresh single-threaded child (see the probe).
			k("unshare -U", "unshare:user", "unshare:user", "EPERM"),
			k("unshare -m", "unshare:mount", "", "EPERM"),
			k("unshare -n", "unshare:net", "", "EPERM"),
			k("clone(CLONE_NEWUSER)", "clone-newuser", "unshare:user", "EPERM"),
			// clone3's flags are out of seccomp's sight, so the filter must refuse it whole;
			// ENOSYS makes libc fall back to clone, whose flags it can check.
			k("clone3 is filtered", "clone3", "", "ENOSYS", "EPERM"),
			k("keyctl", "keyctl", "keyctl", "EPERM", "ENOSYS"),
			k("bpf", "bpf", "bpf", "EPERM", "ENOSYS"),
			k("perf_event_open", "perf", "perf", "EPERM", "EACCES", "ENOSYS"),
			k("io_uring_setup", "io_uring", "io_uring", "EPERM", "ENOSYS"),
			k("mknod a character device", "mknod:/tmp/sbx-probe-null", "", "EPERM"),
			k("chroot", "chroot", "", "EPERM"),
			k("raw IP socket", "socket:raw", "", "EPERM"),
			k("packet socket", "socket:packet", "", "EPERM"),
		)
	}
	return out
}

func networkProbes() []expect {
	n := func(name, op string, errno ...string) expect {
		return expect{area: "network", name: name, op: op, errno: errno}
	}
	return []expect{
		{area: "network", name: "only loopback", op: "ifaces", value: "lo"},
		// The probe refuses to try these when any other interface exists. With only lo
		// there is no route: the kernel answers at once and nothing leaves the sandbox. A
		// resolver on loopback (none here) would be refused instead.
		n("DNS fails", "dns:example.com", "ENETUNREACH", "ECONNREFUSED"),
		n("connect to TEST-NET-1", "connect:192.0.2.1:80", "ENETUNREACH"),
		// Without an IPv6 address to send from, the kernel refuses before routing.
		n("connect to the IPv6 documentation prefix", "connect:[2001:db8::1]:80", "EADDRNOTAVAIL", "ENETUNREACH"),
	}
}

// mount is one line of the probe's mount table.
type mount struct {
	Point, Root, FSType, Source string
}

// virtualFS are file systems that hold no host files.
var virtualFS = []string{"proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "devtmpfs"}

func hostProbes(s *clitest.CLI, containerID, agentDir, iso string, workspace probeWorkspace) []expect {
	h := func(name, op, value string) expect { return expect{area: "host", name: name, op: op, value: value} }
	return []expect{
		h("no DOCKER_HOST", "env:DOCKER_HOST", "unset"),
		h("no host variable", "env:SBX_HOST_MARKER", "unset"),
		{area: "host", name: "no host values in the environment", op: "environ", check: func(r probeResult) error {
			var vars []string
			if err := json.Unmarshal([]byte(r.Value), &vars); err != nil {
				return err
			}
			for _, kv := range vars {
				name, _, _ := strings.Cut(kv, "=")
				if strings.HasPrefix(name, "DOCKER_") || strings.HasPrefix(name, "SBX_") ||
					strings.Contains(kv, s.Marker) || strings.Contains(kv, s.Home) || strings.Contains(kv, s.Project) {
					return fmt.Errorf("host variable inside: %s", kv)
				}
			}
			return nil
		}},
		{area: "host", name: "no engine socket and no host path but the workspace", op: "mounts", check: func(r probeResult) error {
			var ms []mount
			if err := json.Unmarshal([]byte(r.Value), &ms); err != nil {
				return err
			}
			// What the engine itself binds in, besides the workspace: the files it writes for
			// every container and its init binary.
			engineFiles := map[string]string{
				"/etc/resolv.conf": "/containers/" + containerID + "/resolv.conf",
				"/etc/hostname":    "/containers/" + containerID + "/hostname",
				"/etc/hosts":       "/containers/" + containerID + "/hosts",
			}
			var problems []string
			// gVisor shows every file its gofer serves from the host as 9p with root "/", so
			// only the mount point tells them apart: the root, the workspace, the engine's
			// files and sbx's agent (its directory and binary), nothing else.
			gofer := []string{"/", "/workspace", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", sandbox.AgentMountPath, sandbox.AgentBinaryPath}
			for _, m := range ms {
				if iso == config.IsolationGVisor && m.FSType == "9p" && slices.Contains(gofer, m.Point) {
					continue
				}
				all := m.Point + " " + m.Root + " " + m.Source
				if strings.Contains(all, "docker.sock") || strings.Contains(all, "containerd") {
					problems = append(problems, "engine socket: "+all)
				}
				switch {
				case slices.Contains(virtualFS, m.FSType):
				case m.Point == "/" && m.FSType == "overlay":
				case m.Point == "/workspace" && workspace(m.Root):
				case m.Point == sandbox.AgentMountPath && strings.HasPrefix(agentDir, s.Home+"/") && strings.HasSuffix(agentDir, m.Root):
					// The sandbox's own agent directory in sbx's state directory.
				case m.Point == sandbox.AgentBinaryPath && m.Root != "" && strings.HasSuffix(s.Bin, m.Root):
					// sbx's own binary, which the sandbox runs as its agent.
				case m.Point == "/sbin/docker-init" || m.Point == "/usr/sbin/docker-init" || m.Point == "/dev/init":
					// --init: the engine's own init binary, bound read-only.
				case engineFiles[m.Point] != "" && strings.HasSuffix(m.Root, engineFiles[m.Point]):
				default:
					problems = append(problems, fmt.Sprintf("host path %s (%s on %s) at %s", m.Root, m.FSType, m.Source, m.Point))
				}
			}
			if len(problems) > 0 {
				return fmt.Errorf("mount table:\n%s", strings.Join(problems, "\n"))
			}
			return nil
		}},
	}
}

// gvisorAnswer is what a probe gets from gVisor's kernel where it differs from Linux's, and why
// that holds the line (or, for the filter, what stands in for it).
type gvisorAnswer struct {
	errno []string
	value string
	check func(probeResult) error
	why   string
}

// noStatusLine is gVisor's answer for a /proc/self/status line it does not write.
func noStatusLine(field string) func(probeResult) error {
	return func(r probeResult) error {
		if r.Errno == "error" && strings.Contains(r.Detail, "no "+field+" in") {
			return nil
		}
		return fmt.Errorf("gVisor 20221219 writes no %s line; got %+v: update this answer", field, r)
	}
}

// anyUser keys a gVisor answer for whoever runs the probe.
const anyUser = "*"

// gvisorAnswers are keyed by the probe operation and who runs it (or anyUser), measured under Debian's runsc 20221219 with the ptrace platform. Every other
// case must get Linux's answer under gVisor too.
var gvisorAnswers = map[[2]string]gvisorAnswer{
	// gVisor checks the directory's permissions before the mount's read-only flag; root, who
	// passes them, still hears EROFS (the root-user cases keep Linux's answer).
	{"create:/sbx-probe", sandboxUser}:             {errno: []string{"EACCES"}, why: "permissions before the read-only mount"},
	{"create:/etc/sbx-probe", sandboxUser}:         {errno: []string{"EACCES"}, why: "permissions before the read-only mount"},
	{"create:/usr/sbx-probe", sandboxUser}:         {errno: []string{"EACCES"}, why: "permissions before the read-only mount"},
	{"create:/workspace/sbx-probe", sandboxUser}:   {errno: []string{"EACCES"}, why: "permissions before the read-only mount"},
	{"create:/sys/sbx-probe", sandboxUser}:         {errno: []string{"EACCES"}, why: "permissions before the read-only mount"},
	{"mkdir:/sys/fs/cgroup/sbx-probe", rootNoCaps}: {errno: []string{"EROFS"}, why: "gVisor's /sys is read-only as a whole"},
	// gVisor does not apply noexec to a PROT_EXEC mapping (exec itself is refused): code
	// loaded from /tmp runs in gVisor's kernel, as any code the sandbox runs does.
	{"mmapx:/tmp", anyUser}: {value: "mapped", why: "noexec holds for exec only"},
	// What gVisor's /proc and /sys do not have cannot be written.
	{"openw:/sys/class/net/lo/mtu", anyUser}:                                                 {errno: []string{"ENOENT"}, why: "no such file in gVisor's sysfs"},
	{"openw:/proc/sys/kernel/core_pattern", anyUser}:                                         {errno: []string{"ENOENT"}, why: "no such file in gVisor's procfs"},
	{"openw:/sys/fs/cgroup/memory.max|/sys/fs/cgroup/memory/memory.limit_in_bytes", anyUser}: {errno: []string{"ENOENT"}, why: "gVisor mounts no cgroup file system"},
	{"mkdir:/sys/fs/cgroup/memory/sbx-probe", anyUser}:                                       {errno: []string{"ENOENT"}, why: "gVisor mounts no cgroup file system"},
	{"read:/proc/keys", anyUser}:                                                             {errno: []string{"ENOENT"}, why: "not in gVisor's procfs"},
	{"read:/proc/timer_list", anyUser}:                                                       {errno: []string{"ENOENT"}, why: "not in gVisor's procfs"},
	// gVisor's statfs reports no mount options; the create, chmod and exec cases show that
	// they hold.
	{"statfs:/", anyUser}:          {value: "rw", why: "statfs shows no mount options under gVisor"},
	{"statfs:/tmp", anyUser}:       {value: "rw", why: "statfs shows no mount options under gVisor"},
	{"status:NoNewPrivs", anyUser}: {check: noStatusLine("NoNewPrivs"), why: "gVisor's status has no such line"},
	{"status:CapAmb", anyUser}:     {check: noStatusLine("CapAmb"), why: "gVisor's status has no such line"},
	// Commands of the sandbox user run under sbx's agent, which has the container's seccomp
	// filter and passes it on (Seccomp 2), so they get Linux's answers. "sbx exec -u" goes
	// through runsc exec, which does not give the processes it starts the filter: what the
	// filter refuses in a container then reaches gVisor's own kernel, which implements it
	// itself or not at all, never the host's: the host sees only gVisor's system calls,
	// under gVisor's own filter.
	{"status:Seccomp", rootNoCaps}: {value: "0", why: "runsc exec starts commands without the container's filter"},
	{"unshare:user", rootNoCaps}:   {value: "child ran", why: "a user namespace of gVisor's kernel"},
	{"clone-newuser", rootNoCaps}:  {value: "child ran", why: "a user namespace of gVisor's kernel"},
	{"io_uring", rootNoCaps}:       {value: "ring created", why: "gVisor's own io_uring, not the host's"},
	{"keyctl", rootNoCaps}:         {errno: []string{"EACCES"}, why: "gVisor's keyring refuses"},
	{"perf", rootNoCaps}:           {errno: []string{"ENODEV"}, why: "gVisor has no perf events"},
	// gVisor's filter for sbx lets clone3 through (runsc would answer the rule's ENOSYS with
	// EPERM, from which libc does not fall back: pkg/sandbox/seccomp.go), and gVisor has none.
	{"clone3", anyUser}:                    {errno: []string{"ENOSYS"}, why: "gVisor has no clone3, which its filter lets through"},
	{"mknod:/tmp/sbx-probe-null", anyUser}: {value: "created", why: "a node in gVisor's tmpfs opens gVisor's devices only"},
	{"socket:raw", anyUser}:                {errno: []string{"EAFNOSUPPORT"}, why: "no raw sockets with --network=host"},
	{"socket:packet", anyUser}:             {errno: []string{"EAFNOSUPPORT"}, why: "no packet sockets with --network=host"},
}

// underGVisor gives the cases whose answer differs under gVisor that answer; the case's name
// says so, and the others keep Linux's. An answer no case uses is a stale table.
func underGVisor(t *testing.T, cases []expect) []expect {
	used := map[[2]string]bool{}
	for i, c := range cases {
		key := [2]string{c.op, c.user}
		a, ok := gvisorAnswers[key]
		if !ok {
			key = [2]string{c.op, anyUser}
			a, ok = gvisorAnswers[key]
		}
		if !ok {
			continue
		}
		used[key] = true
		c.errno, c.value, c.check = a.errno, a.value, a.check
		c.name += " [gVisor: " + a.why + "]"
		cases[i] = c
	}
	for key := range gvisorAnswers {
		if !used[key] {
			t.Errorf("the gVisor answer for %q (user %q) matches no case", key[0], key[1])
		}
	}
	return cases
}
