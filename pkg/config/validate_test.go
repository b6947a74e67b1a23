package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// project writes a project file and returns a setup function for the validation table.
func project(content string) func(f *fixture) {
	return func(f *fixture) { f.projectFile(content) }
}

func TestValidationRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fixture)
		key   string
		want  string // in the problem's String()
	}{
		{"mode", project("mode: sometimes\n"), "mode", `project:@/.sbx.yaml:1: mode "sometimes": not one of all, non-main, off`},
		{"profile", project("profile: gpu\n"), "profile", "not one of sandbox, common, browser"},
		{"workspace", project("workspace: yes\n"), "workspace", "not one of none, ro, rw"},
		{"workdir relative", project("workdir: src\n"), "workdir", "not an absolute path"},
		{"image with spaces", project("image: a b\n"), "image", "no spaces"},
		{"setup package as an option", project("setup:\n  apt: [--allow-unauthenticated]\n"), "setup.apt[0]", "not a package name with an optional version"},
		{"setup package with a shell word", project("setup:\n  pip: ['requests; curl x']\n"), "setup.pip[0]", "not a package name"},
		{"setup empty command", project("setup:\n  run: ['  ']\n"), "setup.run[0]", "an empty command"},
		{"user name", project("user: nobody\n"), "user", "not a numeric uid:gid"},
		{"pool negative", project("pool: -1\n"), "pool", `pool "-1": must be from 0 to 64`},
		{"pool too large", project("pool: 65\n"), "pool", "must be from 0 to 64"},
		{"tmpfs suid", project("tmpfs: ['/x:size=1m,suid']\n"), "tmpfs[3]", "suid is refused"},
		{"tmpfs dev", project("tmpfs: ['/x:size=1m,dev']\n"), "tmpfs[3]", "dev is refused"},
		{"tmpfs without size", project("tmpfs: [/x]\n"), "tmpfs[3]", "no size"},
		{"tmpfs size 0", project("tmpfs: [/x:size=0]\n"), "tmpfs[3]", "0 would mean unlimited"},
		{"tmpfs unknown option", project("tmpfs: ['/x:size=1m,huge=always']\n"), "tmpfs[3]", "unknown tmpfs option huge=always"},
		{"tmpfs exec and noexec", project("tmpfs: ['/x:size=1m,exec,noexec']\n"), "tmpfs[3]", "both exec and noexec"},
		{"tmpfs relative", project("tmpfs: [x:size=1m]\n"), "tmpfs[3]", "not absolute"},
		{"tmpfs options split by a flow list", project("tmpfs: [/x:size=1m,exec]\n"), "tmpfs[4]", `tmpfs[4] "exec:nosuid,nodev,noexec": the mount path is not absolute`},
		{"tmpfs over /proc", project("tmpfs: [/proc/x:size=1m]\n"), "tmpfs[3]", "the engine manages /proc"},
		{"tmpfs over the root", project("tmpfs: [/:size=1m]\n"), "tmpfs[3]", "cannot replace the root"},
		{"tmpfs over the workspace", project("tmpfs: [/workspace:size=1m]\n"), "tmpfs[3]", "holds the project"},
		{"network host", project("network: host\n"), "network", "shares the host's network stack"},
		{"network host from env", func(f *fixture) { f.env["SBX_NETWORK"] = "host" }, "network", `env:SBX_NETWORK: network "host"`},
		{"network container join", project("network: container:db\n"), "network", "joining another container's network namespace"},
		{"network name", project("network: 'my net'\n"), "network", "not a network name"},
		{"capDrop without ALL", project("capDrop: [NET_RAW]\n"), "capDrop", "does not include ALL"},
		{"capAdd SYS_ADMIN", project("capAdd: [SYS_ADMIN]\n"), "capAdd[0]", "only NET_BIND_SERVICE may be added"},
		{"capAdd ALL", project("capAdd: [all]\n"), "capAdd[0]", "ALL would give back every capability"},
		{"memory below minimum", project("memory: 8m\n"), "memory", `memory "8m": below the minimum of 16m`},
		{"swap below memory", project("memory: 2g\nmemorySwap: 1g\n"), "memorySwap", "smaller than memory (2g)"},
		{"shm zero", project("shmSize: 0\n"), "shmSize", "more than 0"},
		{"cpus zero", project("cpus: 0\n"), "cpus", "at least 0.01"},
		{"cpus above host", project("cpus: 8\n"), "cpus", "more than this host's 4 CPUs"},
		{"pids unlimited", project("pidsLimit: -1\n"), "pidsLimit", "below the minimum of 16"},
		{"pids too low", func(f *fixture) { f.flag("pidsLimit", "8") }, "pidsLimit", `flag:--pidsLimit: pidsLimit "8"`},
		{"maxRunning negative", project("maxRunning: -1\n"), "maxRunning", "must not be negative"},
		{"evict unknown", func(f *fixture) { f.env["SBX_EVICT"] = "kill" }, "evict", `env:SBX_EVICT: evict "kill": not one of pause, stop`},
		{"ulimit unknown", project("ulimits: {files: 10}\n"), "ulimits.files", "unknown limit"},
		{"ulimit soft above hard", project("ulimits: {nofile: 10:5}\n"), "ulimits.nofile", "soft limit is above the hard limit"},
		{"secret in env", project("env:\n  GITHUB_TOKEN: ghp_abc\n"), "env.GITHUB_TOKEN", `project:@/.sbx.yaml:2: env.GITHUB_TOKEN "***": looks like a secret`},
		{"cloud credential in env", project("env: {AWS_ACCESS_KEY_ID: AKIA}\n"), "env.AWS_ACCESS_KEY_ID", "looks like a secret"},
		{"env name", project("env: {'1X': a}\n"), "env.1X", "not a variable name"},
		{"env NUL", project("env: {A: \"a\\0b\"}\n"), "env.A", "NUL byte"},
		{"passEnv name", project("passEnv: ['A-B']\n"), "passEnv[0]", "not a variable name"},
		{"bind source relative", project("binds: [data:/data]\n"), "binds[0]", "the host path data is not absolute"},
		{"bind source normalising into /etc", project("binds: ['@/../../../../../../../../etc:/x']\n"), "binds[0]", "/etc is a protected system path"},
		{"bind source symlink to /etc", func(f *fixture) {
			if err := os.Symlink("/etc", filepath.Join(f.root, "cfg")); err != nil {
				t.Fatal(err)
			}
			f.projectFile("binds: ['@/cfg:/cfg:ro']\n")
		}, "binds[0]", "@/cfg resolves through symlinks to /etc, which is a protected system path"},
		{"bind source symlink into /etc", func(f *fixture) {
			if err := os.Symlink("/etc", filepath.Join(f.root, "cfg")); err != nil {
				t.Fatal(err)
			}
			f.projectFile("binds: ['@/cfg/ssl:/ssl:ro']\n")
		}, "binds[0]", "is inside a protected system path /etc"},
		{"bind source root", project("binds: ['/:/host']\n"), "binds[0]", "the host's root directory"},
		{"bind source covering /var/lib/docker", project("binds: ['/var/lib:/x']\n"), "binds[0]", "contains a protected system path /var/lib/docker"},
		{"bind source under /usr", project("binds: ['/usr/share:/x']\n"), "binds[0]", "is inside a protected system path /usr"},
		{"bind docker.sock", func(f *fixture) {
			f.write("docker.sock", "")
			f.projectFile("binds: ['@/docker.sock:/var/run/docker.sock']\n")
		}, "binds[0]", "is a container engine socket"},
		{"bind covering DOCKER_HOST's socket", func(f *fixture) {
			f.env["DOCKER_HOST"] = "unix://" + f.path("run/engine.sock")
			f.mkdir("run")
			f.projectFile("binds: ['@/run:/x']\n")
		}, "binds[0]", "contains the engine socket"},
		{"bind $HOME", project("binds: ['$H:/home']\n"), "binds[0]", "is your home directory"},
		{"bind above $HOME", project("binds: ['$H/..:/home']\n"), "binds[0]", "contains your home directory"},
		{"bind ~/.ssh", project("binds: ['$H/.ssh:/k:ro']\n"), "binds[0]", "is a credentials path"},
		{"bind inside ~/.config", project("binds: ['$H/.config/gh:/gh:ro']\n"), "binds[0]", "is inside a credentials path ~/.config"},
		{"bind outside the project", func(f *fixture) {
			f.mkdir("~/src")
			f.projectFile("binds: ['$H/src:/src']\n")
		}, "binds[0]", "is outside the project root @"},
		{"bind symlink out of the project", func(f *fixture) {
			f.mkdir("~/src")
			if err := os.Symlink(f.path("~/src"), f.path("out")); err != nil {
				t.Fatal(err)
			}
			f.projectFile("binds: ['@/out:/src']\n")
		}, "binds[0]", "@/out (resolving to ~/src) is outside the project root"},
		{"bind source missing", project("binds: ['@/missing:/m']\n"), "binds[0]", "does not exist"},
		{"bind target relative", func(f *fixture) { f.mkdir("d"); f.projectFile("binds: ['@/d:d']\n") }, "binds[0]", "the container path d is not absolute"},
		{"bind target under /workspace", func(f *fixture) { f.mkdir("d"); f.projectFile("binds: ['@/d:/workspace/d']\n") }, "binds[0]", "at or under /workspace, which sbx itself uses"},
		{"bind target on a tmpfs", func(f *fixture) { f.mkdir("d"); f.projectFile("binds: ['@/d:/tmp']\n") }, "binds[0]", "at or under /tmp"},
		{"bind target over /proc even with the switch", func(f *fixture) {
			f.mkdir("d")
			f.projectFile("dangerouslyAllowReservedTargets: true\nbinds: ['@/d:/proc/x']\n")
		}, "binds[0]", "nothing may be mounted over /proc/x"},
		{"project root is $HOME", func(f *fixture) { f.root = f.home }, "workspace", "the project root (from working directory) ~ is your home directory; mounting it at /workspace"},
		{"project root inside /etc", func(f *fixture) { f.root = "/etc" }, "workspace", "/etc is a protected system path"},
		{"seccomp unconfined", project("seccompProfile: unconfined\n"), "seccompProfile", "turns off the system-call filter"},
		{"seccomp relative", project("seccompProfile: prof.json\n"), "seccompProfile", "not an absolute path"},
		{"seccomp missing", project("seccompProfile: /nonexistent/prof.json\n"), "seccompProfile", "does not exist"},
		{"apparmor unconfined", project("apparmorProfile: unconfined\n"), "apparmorProfile", "turns off AppArmor"},
		{"apparmor Unconfined", project("apparmorProfile: Unconfined\n"), "apparmorProfile", "turns off AppArmor"},
		{"seccomp UnConfined", project("seccompProfile: UnConfined\n"), "seccompProfile", "turns off the system-call filter"},
		{"network HOST", project("network: HOST\n"), "network", "shares the host's network stack"},
		{"network Bridge", project("network: Bridge\n"), "network", "case-sensitive"},
		{"runtime name", project("runtime: 'run c'\n"), "runtime", "not a runtime name"},
		{"runtime beside gvisor", project("isolation: gvisor\nruntime: kata\n"), "runtime", "isolation: gvisor already picks the runtime (runsc-sbx)"},
		{"runtime runsc beside gvisor", func(f *fixture) { f.env["SBX_ISOLATION"] = "gvisor"; f.projectFile("runtime: runsc\n") }, "runtime", "the two disagree"},
		{"sbx's gVisor runtime by name", project("runtime: runsc-sbx\n"), "runtime", "chosen by isolation: gvisor"},
		{"idleStop under gvisor", project("isolation: gvisor\nidleStop: 15m\n"), "idleStop", "gVisor keeps file locks to itself"},
		{"isolation unknown", project("isolation: vm\n"), "isolation", "vm"},
		{"dns", project("dns: [dns.google]\n"), "dns[0]", "not an IP address"},
		{"egress unknown preset", project("egress: [pypi.org, \"\\u0040pyhton\"]\n"), "egress[1]", "unknown preset"},
		{"egress whole domain", project("egress: ['*.com']\n"), "egress[0]", "egress[0] \"*.com\""},
		{"egress with bridge", project("network: bridge\negress: [deb.debian.org]\n"), "egress", "egress works only with network none"},
		{"extraHosts", project("extraHosts: ['db 10.0.0.1']\n"), "extraHosts[0]", "not NAME:IP"},
		{"prune negative", project("prune: {idleHours: -1}\n"), "prune.idleHours", "must not be negative"},
		{"tool glob", project("tools: {deny: ['[']}\n"), "tools.deny[0]", "not a valid glob"},
		{"caCerts missing", project("caCerts: certs/ca.pem\n"), "caCerts", `project:@/.sbx.yaml:1: caCerts "@/certs/ca.pem": @/certs/ca.pem does not exist`},
		{"caCerts from env missing", func(f *fixture) { f.env["SBX_CA_CERTS"] = "/nonexistent/ca.pem" }, "caCerts", `env:SBX_CA_CERTS: caCerts "/nonexistent/ca.pem": /nonexistent/ca.pem does not exist`},
		{"caCerts not PEM", func(f *fixture) { f.write("ca.der", "\x30\x82"); f.projectFile("caCerts: ca.der\n") }, "caCerts", "@/ca.der holds no PEM certificate"},
		{"caCerts with a key", func(f *fixture) {
			f.write("ca.pem", f.ca()+"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
			f.projectFile("caCerts: ca.pem\n")
		}, "caCerts", "holds a PRIVATE KEY block: only certificates are handed to a sandbox"},
		{"caCerts link planted in the project", func(f *fixture) {
			if err := os.Symlink(f.write("~/.ssh/ca.pem", f.ca()), f.path("ca.pem")); err != nil {
				t.Fatal(err)
			}
			f.projectFile("caCerts: ca.pem\n")
		}, "caCerts", "@/ca.pem is a symbolic link inside the project @, which sbx does not follow"},
		{"caCerts host without added CAs", project("caCerts: host\n"), "caCerts", "the host has no added CA certificates in"},
		{"bind target over the CA bundle", func(f *fixture) { f.mkdir("d"); f.projectFile("binds: ['@/d:/etc/sbx/ca']\n") }, "binds[0]", "at or under /etc/sbx/ca, which sbx itself uses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.setup(f)
			r, err := f.resolve()
			if err == nil {
				t.Fatalf("accepted; want %s refused", tt.key)
			}
			if r == nil {
				t.Fatalf("no Resolved with the refusal: %v", err)
			}
			want := strings.NewReplacer("@", f.root, "~", f.home).Replace(tt.want)
			var found bool
			for _, p := range r.Problems {
				if p.Reason == "" || p.Fix == "" || p.Source.Layer == "" {
					t.Errorf("incomplete problem: %+v", p)
				}
				if p.Key == tt.key && strings.Contains(p.String(), want) {
					found = true
				}
			}
			if !found {
				t.Errorf("no problem for %s containing %q; got:\n%v", tt.key, want, err)
			}
		})
	}
}

func TestValidationAccepts(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fixture)
	}{
		{"defaults", func(*fixture) {}},
		{"every profile", func(f *fixture) { f.flag("profile", "common") }},
		{"browser profile", func(f *fixture) { f.flag("profile", "browser") }},
		{"setup", project("setup:\n  apt: [bc, 'python3-venv=3.11.2-1+b1', 'libc6:amd64']\n  npm: [typescript, 'left-pad^1']\n  pip: ['requests[socks]>=2.31,<3', 'numpy==1.*']\n  run: ['make -C /opt/x install']\n")},
		{"NET_BIND_SERVICE in any spelling", project("capAdd: [net_bind_service, CAP_NET_BIND_SERVICE]\n")},
		{"exec on a tmpfs", project("tmpfs: ['/cache:size=1g,exec,mode=1777,uid=1000']\n")},
		{"bind inside the project", func(f *fixture) {
			f.mkdir("data")
			f.projectFile("binds: ['@/data:/data:ro', '@/data/../data:/data2']\n")
		}},
		{"external bind with its switch", func(f *fixture) {
			f.mkdir("~/src")
			f.projectFile("dangerouslyAllowExternalBindSources: true\nbinds: ['$H/src:/src']\n")
		}},
		{"reserved target with its switch", func(f *fixture) {
			f.mkdir("d")
			f.projectFile("dangerouslyAllowReservedTargets: true\nbinds: ['@/d:/workspace/d']\n")
		}},
		{"container network with its switch", project("dangerouslyAllowContainerNamespaceJoin: true\nnetwork: container:db\n")},
		{"project inside a home under a protected path", func(f *fixture) {
			f.home = "/root"
			f.root = f.mkdir(filepath.Join(t.TempDir(), "p"))
		}},
		{"secret names are fine in passEnv", project("passEnv: [GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY]\n")},
		{"workspace none outside any project", func(f *fixture) { f.root = f.home; f.flag("workspace", "none") }},
		{"explicit root user", project("user: '0'\n")},
		{"user-defined network", project("network: my-net_1\n")},
		{"timeouts and extra hosts", project("timeout: 1h30m\nextraHosts: ['db.local:10.0.0.5', 'host.docker.internal:host-gateway']\ndns: ['1.1.1.1', '::1']\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.setup(f)
			// What validation accepts, a project file may say once the user trusts it.
			_, err := os.Stat(filepath.Join(f.root, ProjectFileName))
			f.trusted = err == nil
			if _, err := f.resolve(); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

func TestValidationWarnings(t *testing.T) {
	f := newFixture(t)
	f.projectFile("image: example/thing:1\ntools:\n  allow: [exce, 'r*']\n")
	f.trusted = true
	r := f.mustResolve()
	var got []string
	for _, w := range r.Warnings {
		got = append(got, w.String()+" | "+w.Fix)
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`image "example/thing:1": not one of sbx's bundled images`,
		`:3: tools.allow[0] "exce": matches no tool | did you mean "exec"?`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings do not contain %q:\n%s", want, all)
		}
	}
	if len(got) != 2 {
		t.Errorf("want 2 warnings, got:\n%s", all)
	}
}

func TestRootOwnedProjectKeepsDefaultUser(t *testing.T) {
	f := newFixture(t)
	f.flag("workspace", "rw")
	in := f.inputs()
	in.FileOwner = func(string) (int, int, error) { return 0, 0, nil }
	r, err := Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.User != DefaultUser {
		t.Errorf("user = %s; root must never be used implicitly", r.Config.User)
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Key != "user" {
		t.Errorf("warnings = %v", r.Warnings)
	}
}

func TestValidationErrorFormat(t *testing.T) {
	f := newFixture(t)
	f.projectFile("memory: 8m\n")
	_, err := f.resolve()
	if got := err.Error(); got != `config refused: project:`+f.root+`/.sbx.yaml:1: memory "8m": below the minimum of 16m` {
		t.Errorf("single: %s", got)
	}
	verr := err.(*ValidationError)
	if verr.ExitCode() != 125 || !strings.HasPrefix(verr.Hint(), "set memory to 16m or more") {
		t.Errorf("code %d hint %q", verr.ExitCode(), verr.Hint())
	}
	f.projectFile("memory: 8m\nnetwork: host\n")
	f.trusted = true
	_, err = f.resolve()
	for _, want := range []string{"config refused (2 problems):", "\n  project:" + f.root + "/.sbx.yaml:2: network \"host\"", "\n    fix: use none"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("multi: %q does not contain %q", err, want)
		}
	}
}

func TestIsSecretName(t *testing.T) {
	for _, s := range []string{"GITHUB_TOKEN", "token", "DB_PASSWORD", "CLIENT_SECRET", "OPENAI_API_KEY", "SSH_PRIVATE_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS", "BASIC_AUTH", "NPM_CONFIG__AUTH", "PGPASSWORD"} {
		if !IsSecretName(s) {
			t.Errorf("%s is not seen as a secret", s)
		}
	}
	for _, s := range []string{"LANG", "HOME", "PATH", "GOPATH", "AUTHOR", "KEYBOARD", "TOKENIZER_MODEL"} {
		if IsSecretName(s) {
			t.Errorf("%s is seen as a secret", s)
		}
	}
}
