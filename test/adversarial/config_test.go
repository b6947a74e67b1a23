package adversarial_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/internal/clitest"
)

// hostileConfig is a refused setting written one way. In args, file, userFile, configFile
// and env, {home} and {project} stand for the case's own $HOME and project directory.
type hostileConfig struct {
	name       string
	key        string   // the key the refusal must name
	why        string   // a part of the reason it must give
	args       []string // flags for both commands
	file       string   // the project's .sbx.yaml
	userFile   string   // $XDG_CONFIG_HOME/sbx/config.yaml
	configFile string   // passed with --config
	env        []string
	fromHome   bool // run with $HOME as the working directory
}

var hostileConfigs = []hostileConfig{
	// Protected host paths as bind sources, spelled many ways.
	{name: "bind /etc", key: "binds[0]", why: "is a protected system path", args: []string{"--bind", "/etc:/h"}},
	{name: "bind /etc/ (trailing slash)", key: "binds[0]", why: "the host path /etc is a protected system path", args: []string{"--bind", "/etc/:/h"}},
	{name: "bind //etc", key: "binds[0]", why: "the host path /etc is a protected system path", args: []string{"--bind", "//etc:/h"}},
	{name: "bind /etc/. ", key: "binds[0]", why: "the host path /etc is a protected system path", args: []string{"--bind", "/etc/.:/h"}},
	{name: "bind /usr/../etc", key: "binds[0]", why: "the host path /etc is a protected system path", args: []string{"--bind", "/usr/../etc:/h"}},
	{name: "bind /ETC (case: another, missing path)", key: "binds[0]", why: "does not exist", args: []string{"--bind", "/ETC:/h"}},
	{name: "bind /etc/ssh (inside)", key: "binds[0]", why: "is inside a protected system path /etc", args: []string{"--bind", "/etc/ssh:/h"}},
	{name: "bind the host root", key: "binds[0]", why: "is the host's root directory", args: []string{"--bind", "/:/host"}},
	{name: "bind /var/run/docker.sock", key: "binds[0]", why: "is inside a protected system path /var/run", args: []string{"--bind", "/var/run/docker.sock:/var/run/docker.sock"}},
	{name: "bind /run/containerd", key: "binds[0]", why: "is inside a protected system path /run", args: []string{"--bind", "/run/containerd:/c"}},
	{name: "bind /var/lib/docker", key: "binds[0]", why: "is a protected system path", args: []string{"--bind", "/var/lib/docker:/d"}},
	{name: "bind /var (contains the engine's state)", key: "binds[0]", why: "contains a protected system path", args: []string{"--bind", "/var:/v"}},
	{name: "bind /root", key: "binds[0]", why: "is a protected system path", args: []string{"--bind", "/root:/r"}},
	{name: "bind $HOME", key: "binds[0]", why: "is your home directory", args: []string{"--bind", "{home}:/h"}},
	{name: "bind $HOME/.ssh", key: "binds[0]", why: "is a credentials path", args: []string{"--bind", "{home}/.ssh:/h"}},
	{name: "bind $HOME/.aws/credentials (inside)", key: "binds[0]", why: "is inside a credentials path", args: []string{"--bind", "{home}/.aws/credentials:/h"}},
	{name: "bind $HOME/.docker/../.ssh", key: "binds[0]", why: "/.ssh is a credentials path", args: []string{"--bind", "{home}/.docker/../.ssh:/h"}},
	{name: "bind $HOME/.SSH (case: not a known name, outside the project)", key: "binds[0]", why: "is outside the project root", args: []string{"--bind", "{home}/.SSH:/h"}},
	{name: "bind a relative path", key: "binds[0]", why: "is not absolute", args: []string{"--bind", "etc:/h"}},
	{name: "bind a relative ../ path", key: "binds[0]", why: "is not absolute", args: []string{"--bind", "../../../../../etc:/h"}},
	{name: "bind ~/.ssh (no tilde expansion)", key: "binds[0]", why: "~/.ssh is not absolute", args: []string{"--bind", "~/.ssh:/h"}},
	{name: "bind $HOME/.ssh written in a file (no env expansion)", key: "binds[0]", why: "$HOME/.ssh is not absolute", file: "binds: [\"$HOME/.ssh:/h\"]\n"},
	{name: "bind ${PWD}/link-etc in a file (no env expansion)", key: "binds[0]", why: "is not absolute", file: "binds: [\"${PWD}/link-etc:/h\"]\n"},
	{name: "bind a project symlink to /etc", key: "binds[0]", why: "resolves through symlinks to /etc", args: []string{"--bind", "{project}/link-etc:/h"}},
	{name: "bind a project symlink to the engine socket", key: "binds[0]", why: "resolves through symlinks to /", args: []string{"--bind", "{project}/link-sock:/s"}},
	{name: "bind a project symlink to $HOME/.ssh", key: "binds[0]", why: "resolves through symlinks to", args: []string{"--bind", "{project}/link-ssh:/h"}},
	{name: "bind a chain of project symlinks to /root", key: "binds[0]", why: "resolves through symlinks to /root", args: []string{"--bind", "{project}/chain1:/h"}},
	{name: "bind a path through a symlinked directory", key: "binds[0]", why: "resolves through symlinks to /etc/ssh", args: []string{"--bind", "{project}/link-etc/ssh:/h"}},
	{name: "bind a project symlink to the project's parent", key: "binds[0]", why: "is outside the project root", args: []string{"--bind", "{project}/link-parent:/h"}},
	{name: "bind {project}/.. ", key: "binds[0]", why: "is outside the project root", args: []string{"--bind", "{project}/..:/h"}},
	{name: "bind a file named containerd.sock", key: "binds[0]", why: "is a container engine socket", args: []string{"--bind", "{project}/containerd.sock:/s"}},
	{name: "bind /etc from a file despite dangerouslyAllowExternalBindSources", key: "binds[0]", why: "is a protected system path",
		file: "dangerouslyAllowExternalBindSources: true\nbinds: [\"/etc:/h\"]\n"},
	{name: "bind the engine socket from the user config file", key: "binds[0]", why: "is inside a protected system path /var/run", userFile: "binds: [\"/var/run/docker.sock:/s\"]\n"},
	{name: "second bind refused, first fine", key: "binds[1]", why: "the host path /etc is a protected system path", args: []string{"--bind", "{project}/data:/data", "--bind", "/etc:/e"}},
	// Bind targets.
	{name: "bind over /proc/sys", key: "binds[0]", why: "nothing may be mounted over /proc/sys", args: []string{"--bind", "{project}/data:/proc/sys"}},
	{name: "bind over /", key: "binds[0]", why: "nothing may be mounted over /", args: []string{"--bind", "{project}/data:/"}},
	{name: "bind over /dev/", key: "binds[0]", why: "nothing may be mounted over /dev", args: []string{"--bind", "{project}/data:/dev/"}},
	{name: "bind into /workspace", key: "binds[0]", why: "which sbx itself uses", args: []string{"--bind", "{project}/data:/workspace/x"}},
	{name: "bind over /tmp (a tmpfs)", key: "binds[0]", why: "which sbx itself uses", args: []string{"--bind", "{project}/data:/tmp"}},
	{name: "bind to a relative target", key: "binds[0]", why: "the container path data is not absolute", args: []string{"--bind", "{project}/data:data"}},
	// Project roots that are protected paths.
	{name: "project /", key: "workspace", why: "is the host's root directory", args: []string{"--project", "/"}},
	{name: "project /etc", key: "workspace", why: "is a protected system path", args: []string{"--project", "/etc"}},
	{name: "project /usr/share (inside)", key: "workspace", why: "is inside a protected system path /usr", args: []string{"--project", "/usr/share"}},
	{name: "project $HOME", key: "workspace", why: "is your home directory", args: []string{"--project", "{home}"}},
	{name: "project $HOME/.ssh", key: "workspace", why: "is a credentials path", args: []string{"--project", "{home}/.ssh"}},
	{name: "project through a symlink to /etc", key: "workspace", why: "/etc is a protected system path", args: []string{"--project", "{project}/link-etc"}},
	{name: "run from $HOME outside any project", key: "workspace", why: "(from working directory)", fromHome: true},
	{name: "project $HOME in rw mode", key: "workspace", why: "is your home directory", args: []string{"--project", "{home}", "--workspace", "rw"}},
	// Network.
	{name: "network host", key: "network", why: "shares the host's network stack", args: []string{"--network", "host"}},
	{name: "network host from SBX_NETWORK", key: "network", why: "env:SBX_NETWORK", env: []string{"SBX_NETWORK=host"}},
	{name: "network HOST (case)", key: "network", why: "shares the host's network stack", args: []string{"--network", "HOST"}},
	{name: "network Host from the user file (case)", key: "network", why: "shares the host's network stack", userFile: "network: Host\n"},
	{name: "network None (case)", key: "network", why: "network names are case-sensitive", args: []string{"--network", "None"}},
	{name: "network Container:x with its switch (case)", key: "network", why: "network modes are case-sensitive",
		userFile: "dangerouslyAllowContainerNamespaceJoin: true\nnetwork: Container:db\n"},
	{name: "network host from a --config file", key: "network", why: "extra.yaml:1", configFile: "network: host\n"},
	{name: "network of another container", key: "network", why: "another container's network namespace", file: "network: container:web\n"},
	// Capabilities.
	{name: "capAdd SYS_ADMIN", key: "capAdd[0]", why: "only NET_BIND_SERVICE may be added", file: "capAdd: [SYS_ADMIN]\n"},
	{name: "capAdd sys_admin (lower case)", key: "capAdd[0]", why: "\"SYS_ADMIN\": only NET_BIND_SERVICE", file: "capAdd: [sys_admin]\n"},
	{name: "capAdd Cap_Sys_Ptrace (mixed case, prefix)", key: "capAdd[0]", why: "\"SYS_PTRACE\": only NET_BIND_SERVICE", file: "capAdd: [Cap_Sys_Ptrace]\n"},
	{name: "capAdd all", key: "capAdd[0]", why: "would give back every capability", file: "capAdd: [all]\n"},
	{name: "capDrop empty", key: "capDrop", why: "does not include ALL", file: "capDrop: []\n"},
	{name: "capDrop without ALL", key: "capDrop", why: "does not include ALL", file: "capDrop: [NET_RAW]\n"},
	// Security profiles.
	{name: "seccomp unconfined from SBX_SECCOMP_PROFILE", key: "seccompProfile", why: "turns off the system-call filter", env: []string{"SBX_SECCOMP_PROFILE=unconfined"}},
	{name: "seccomp Unconfined (case)", key: "seccompProfile", why: "turns off the system-call filter", file: "seccompProfile: Unconfined\n"},
	{name: "seccomp profile missing", key: "seccompProfile", why: "does not exist", file: "seccompProfile: /nonexistent/seccomp.json\n"},
	{name: "apparmor unconfined", key: "apparmorProfile", why: "turns off AppArmor's confinement", file: "apparmorProfile: unconfined\n"},
	{name: "apparmor Unconfined (case)", key: "apparmorProfile", why: "turns off AppArmor's confinement", userFile: "apparmorProfile: Unconfined\n"},
	{name: "seccomp UNCONFINED (case)", key: "seccompProfile", why: "turns off the system-call filter", env: []string{"SBX_SECCOMP_PROFILE=UNCONFINED"}},
	// Limits that would mean "unlimited".
	{name: "pids limit 0", key: "pidsLimit", why: "below the minimum of 16", args: []string{"--pids-limit", "0"}},
	{name: "pids limit -1 from SBX_PIDS_LIMIT", key: "pidsLimit", why: "below the minimum of 16", env: []string{"SBX_PIDS_LIMIT=-1"}},
	{name: "memory 1m", key: "memory", why: "below the minimum of 16m", args: []string{"--memory", "1m"}},
	{name: "memory swap below memory", key: "memorySwap", why: "smaller than memory", file: "memory: 1g\nmemorySwap: 512m\n"},
	{name: "cpus 0", key: "cpus", why: "must be at least 0.01", args: []string{"--cpus", "0"}},
	{name: "shm size 0", key: "shmSize", why: "must be more than 0", file: "shmSize: 0\n"},
	// tmpfs options.
	{name: "tmpfs /tmp with suid", key: "tmpfs[0]", why: "suid is refused", file: "tmpfs: [\"/tmp:size=1m,suid\"]\n"},
	{name: "tmpfs /tmp/ (trailing slash) with suid", key: "tmpfs[0]", why: "suid is refused", file: "tmpfs: [\"/tmp/:size=1m,suid\"]\n"},
	{name: "tmpfs with dev", key: "tmpfs[3]", why: "dev is refused", file: "tmpfs: [\"/data:size=1m,dev\"]\n"},
	{name: "tmpfs with SUID (case)", key: "tmpfs[3]", why: "unknown tmpfs option SUID", file: "tmpfs: [\"/data:size=1m,SUID\"]\n"},
	{name: "tmpfs without size", key: "tmpfs[3]", why: "no size", file: "tmpfs: [\"/data\"]\n"},
	{name: "tmpfs of size 0", key: "tmpfs[3]", why: "is not a size above 0", file: "tmpfs: [\"/data:size=0\"]\n"},
	{name: "tmpfs over /proc/x", key: "tmpfs[3]", why: "the engine manages /proc", file: "tmpfs: [\"/proc/x:size=1m\"]\n"},
	{name: "tmpfs over /", key: "tmpfs[3]", why: "cannot replace the root file system", file: "tmpfs: [\"/:size=1m\"]\n"},
	{name: "tmpfs in /workspace via ..", key: "tmpfs[3]", why: "/workspace holds the project", file: "tmpfs: [\"/data/../workspace/x:size=1m\"]\n"},
	{name: "tmpfs at a relative path", key: "tmpfs[3]", why: "not absolute", file: "tmpfs: [\"data:size=1m\"]\n"},
	// Secrets stored on the container.
	{name: "env AWS_SECRET_ACCESS_KEY", key: "env.AWS_SECRET_ACCESS_KEY", why: "looks like a secret", file: "env: {AWS_SECRET_ACCESS_KEY: x}\n"},
	{name: "env github_token (lower case)", key: "env.github_token", why: "looks like a secret", args: []string{"--env", "github_token=x"}},
	// A user looked up inside the untrusted image.
	{name: "user by name", key: "user", why: "not a numeric uid:gid", args: []string{"--user", "sandbox"}},
}

// Every refused setting must be refused by explain --check (exit 1) and by create (exit
// 125, naming the key), before the engine is asked for anything: no container, no volume.
func TestHostileConfiguration(t *testing.T) {
	sc := configGroup.start(t)
	if len(hostileConfigs) < 40 {
		t.Fatalf("the corpus has %d cases; the issue asks for at least 40", len(hostileConfigs))
	}
	for i, hc := range hostileConfigs {
		t.Run(hc.name, func(t *testing.T) {
			sc.case_(t)
			s := newSBX(t)
			hostileTree(t, s)
			expand := strings.NewReplacer("{home}", s.Home, "{project}", s.Project).Replace
			var args []string
			for _, a := range hc.args {
				args = append(args, expand(a))
			}
			if hc.file != "" {
				s.Write(".sbx.yaml", hc.file)
			}
			if hc.userFile != "" {
				writeFile(t, filepath.Join(s.Home, ".config", "sbx", "config.yaml"), hc.userFile)
			}
			if hc.configFile != "" {
				p := filepath.Join(s.Home, "extra.yaml")
				writeFile(t, p, hc.configFile)
				args = append(args, "--config", p)
			}
			s.Env = append(s.Env, hc.env...)
			dir := s.Project
			if hc.fromHome {
				dir = s.Home
			}
			name := sandboxName(fmt.Sprintf("cfg%d", i))

			cmd := s.Cmd(append([]string{"explain", "--check", name}, args...)...)
			cmd.Dir = dir
			if r := s.RunIn(cmd); r.Code != 1 || !strings.Contains(r.Stdout, hc.key) || !strings.Contains(r.Stdout, hc.why) {
				t.Errorf("explain --check: want exit 1 naming %s because it %q: %s", hc.key, hc.why, r)
			}
			cmd = s.Cmd(append([]string{"create", "-n", name}, args...)...)
			cmd.Dir = dir
			r := s.RunIn(cmd)
			if r.Code != 125 || !strings.Contains(r.Stderr, "config refused") || !strings.Contains(r.Stderr, hc.key) || !strings.Contains(r.Stderr, hc.why) {
				t.Errorf("create: want exit 125 refusing %s because it %q: %s", hc.key, hc.why, r)
			}
			if list := s.Containers(name); len(list) > 0 {
				t.Errorf("a container was created despite the refusal: %s (%s)", list[0].Names, list[0].State)
			}
		})
	}
}

// hostileTree lays out what the cases point at: credentials in $HOME and symlinks in the
// project that lead to protected places.
func hostileTree(t *testing.T, s *clitest.CLI) {
	t.Helper()
	for _, d := range []string{".ssh", ".aws", ".docker", ".SSH"} {
		if err := os.MkdirAll(filepath.Join(s.Home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(s.Home, ".aws", "credentials"), "[default]\n")
	writeFile(t, filepath.Join(s.Project, "data", "x"), "x")
	writeFile(t, filepath.Join(s.Project, "containerd.sock"), "")
	links := map[string]string{
		"link-etc":    "/etc",
		"link-sock":   "/var/run/docker.sock",
		"link-ssh":    filepath.Join(s.Home, ".ssh"),
		"chain1":      "chain2",
		"chain2":      "/root",
		"link-parent": "..",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(s.Project, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
