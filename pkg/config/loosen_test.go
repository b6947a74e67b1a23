package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/cacerts/cacertstest"
)

// TestLoosening runs the settings an untrusted project file may and may not make. A refused
// one names its key and the file's line; nothing else about the config is refused.
func TestLoosening(t *testing.T) {
	tests := []struct {
		name     string
		file     string // the project's .sbx.yaml; @ is the project root, $H the home
		userFile string
		flags    map[string]string
		sandbox  string
		// want is "KEY:LINE" of every refusal, in order; none means accepted.
		want []string
		// allows is a part of the first refusal's reason.
		allows string
	}{
		// The attacks the trust boundary was built for.
		{name: "mode off runs on the host", file: "mode: off\n", want: []string{"mode:1"}, allows: "runs commands on the host"},
		{name: "mode non-main", file: "mode: non-main\n", want: []string{"mode:1"}},
		{name: "passEnv hands over a secret", file: "passEnv: [GITHUB_TOKEN]\n", want: []string{"passEnv[0]:1"}, allows: "hands your GITHUB_TOKEN variable"},
		{name: "external bind of ~/.bashrc", file: "dangerouslyAllowExternalBindSources: true\nbinds: ['$H/.bashrc:/b']\n",
			want: []string{"binds[0]:2", "dangerouslyAllowExternalBindSources:1"}, allows: "mounts the host path"},
		{name: "bind inside the project", file: "binds: ['@/data:/data:ro']\n", want: []string{"binds[0]:1"}, allows: "read-only"},
		{name: "allow-all seccomp file from the repository", file: "seccompProfile: @/allow.json\n", want: []string{"seccompProfile:1"}, allows: "replaces sbx's system-call filter"},
		{name: "apparmor profile", file: "apparmorProfile: lenient\n", want: []string{"apparmorProfile:1"}},
		{name: "another runtime", file: "runtime: kata\n", want: []string{"runtime:1"}},
		// A runtime is a name in the engine's daemon.json: "runsc" may be anything there. Only
		// isolation: gvisor is a runtime sbx checks (runsc-sbx, with its arguments).
		{name: "runsc is only a name", file: "runtime: runsc\n", want: []string{"runtime:1"}, allows: "isolation: gvisor"},
		{name: "isolation gvisor only tightens", file: "isolation: gvisor\n"},
		{name: "isolation container below the user's gvisor", file: "isolation: container\n", userFile: "isolation: gvisor\n",
			want: []string{"isolation:1"}, allows: "instead of gVisor's"},
		{name: "isolation container below a gvisor flag", file: "isolation: container\n", flags: map[string]string{"isolation": "gvisor"}},
		{name: "isolation container, as the user's", file: "isolation: container\n"},
		{name: "root user", file: "user: '0:0'\n", want: []string{"user:1"}, allows: "as root"},
		{name: "another uid", file: "user: 1500:1500\n", want: []string{"user:1"}, allows: "1500:1500 instead of 1000:1000"},
		{name: "the default user, written out", file: "user: 1000:1000\n"},
		{name: "writable root", file: "readOnlyRoot: false\n", want: []string{"readOnlyRoot:1"}},
		{name: "a capability", file: "capAdd: [NET_BIND_SERVICE]\n", want: []string{"capAdd[0]:1"}},
		{name: "the browser tool", file: "tools:\n  allow: ['*']\n  deny: []\n", want: []string{"tools.allow[0]:2", "tools.allow[0]:2", "tools.allow[0]:2"}, allows: "allows the browser tool"},
		{name: "the apply tool writes on the host", file: "tools:\n  deny: [browser]\n  allow: [exec, read, write, apply]\n", want: []string{"tools.allow[3]:3"}, allows: "allows the apply tool"},
		{name: "the ports tool", file: "tools:\n  allow: [exec, ports]\n  deny: [browser]\n", want: []string{"tools.allow[1]:2"}, allows: "allows the ports tool"},
		{name: "no deny list, the default allow list", file: "tools:\n  deny: []\n"},
		{name: "the browser tool by glob", file: "tools:\n  deny: [ex*]\n  allow: ['*']\n", want: []string{"tools.allow[0]:3", "tools.allow[0]:3", "tools.allow[0]:3"}, allows: "browser"},
		{name: "a narrower tool policy", file: "tools:\n  allow: [read]\n  deny: [browser, exec]\n"},
		{name: "network bridge", file: "network: bridge\n", want: []string{"network:1"}, allows: "network access"},
		{name: "the browser profile brings bridge", file: "profile: browser\n", want: []string{"profile:1"}, allows: "brings network: bridge"},
		{name: "the common profile", file: "profile: common\n"},
		{name: "memory without a ceiling", file: "memory: 100000g\n", want: []string{"memory:1"}, allows: "limits.memory (8g)"},
		{name: "pids without a ceiling", file: "pidsLimit: 100000000\n", want: []string{"pidsLimit:1"}, allows: "limits.pidsLimit (4096)"},
		{name: "cpus above the ceiling", file: "cpus: 2\n", userFile: "limits: {cpus: 1.5}\n", want: []string{"cpus:1"}, allows: "limits.cpus (1.5)"},
		{name: "memory up to the ceiling", file: "memory: 4g\npidsLimit: 2048\ncpus: 2\nshmSize: 1g\n"},
		{name: "lower limits", file: "memory: 256m\npidsLimit: 64\ncpus: 0.5\ntimeout: 30s\n"},
		{name: "swap", file: "memorySwap: 2g\n", want: []string{"memorySwap:1"}},
		{name: "no timeout", file: "timeout: 0\n", want: []string{"timeout:1"}, allows: "no time limit"},
		{name: "a pool keeps sandboxes running", file: "pool: 2\n", want: []string{"pool:1"}, allows: "keeps 2 started sandboxes running"},
		{name: "no pool, written out", file: "pool: 0\n"},
		{name: "a pool within the user's", file: "pool: 1\n", userFile: "pool: 3\n"},
		{name: "a timeout above the ceiling", file: "timeout: 2h\n", want: []string{"timeout:1"}},
		{name: "an exec tmpfs", file: "tmpfs: ['/cache:size=64m,exec']\n", want: []string{"tmpfs[3]:1"}, allows: "allows running programs"},
		{name: "exec over /tmp", file: "tmpfs: ['/tmp:size=64m,exec']\n", want: []string{"tmpfs[0]:1"}},
		{name: "a tmpfs above the ceiling", file: "tmpfs: ['/cache:size=2g']\n", want: []string{"tmpfs[3]:1"}, allows: "limits.tmpfsSize"},
		{name: "a small tmpfs", file: "tmpfs: ['/cache:size=512m']\n"},
		{name: "a higher ulimit", file: "ulimits: {nofile: 65536:65536, core: 0:0}\n", want: []string{"ulimits.nofile:1"}},
		{name: "a dropped ulimit", file: "ulimits: {nofile: 1024:1024}\n", want: []string{"ulimits:1"}, allows: "drops the core limit"},
		{name: "lower ulimits", file: "ulimits: {nofile: 1024:1024, core: 0:0}\n"},
		{name: "no init", file: "init: false\n", want: []string{"init:1"}},
		{name: "dns and hosts", file: "dns: [10.0.0.1]\nextraHosts: ['a.b:10.0.0.2']\n", want: []string{"dns[0]:1", "extraHosts[0]:2"}},
		{name: "an image sbx did not build", file: "image: example/thing:1\n", want: []string{"image:1"}, allows: "registry credentials"},
		{name: "a bundled image", file: "image: sbx-sandbox-common:bookworm-slim\n"},
		{name: "setup installs and runs as root", file: "setup:\n  apt: [bc]\n  npm: [typescript]\n  pip: [requests]\n  run: ['make install']\n",
			want: []string{"setup.apt:2", "setup.npm:3", "setup.pip:4", "setup.run:5"}, allows: "installs Debian packages as root"},
		{name: "the user's own setup, repeated", file: "setup:\n  apt: [bc]\n", userFile: "setup:\n  apt: [bc]\n"},
		{name: "a setup other than the user's", file: "setup:\n  apt: [bc, curl]\n", userFile: "setup:\n  apt: [bc]\n", want: []string{"setup.apt:2"}},
		{name: "maxRunning and evict", file: "maxRunning: 1\nevict: stop\n", want: []string{"maxRunning:1", "evict:2"}, allows: "other projects' sandboxes"},
		{name: "workspace rw", file: "workspace: rw\n", want: []string{"workspace:1"}},
		{name: "workspace none", file: "workspace: none\n"},
		// The overlay keeps every change off the host until the user applies it.
		{name: "workspace overlay", file: "workspace: overlay\n"},
		{name: "fewer protected paths", file: "protectedPaths: [.sbx.yaml]\n", want: []string{"protectedPaths:1"}, allows: "lets a rw sandbox write .git/hooks"},
		{name: "more protected paths", file: "protectedPaths: [.sbx.yaml, .git/hooks, .git/config, .git/config.worktree, .gitmodules, .husky, .githooks, .pre-commit-config.yaml, lefthook.yml, .lefthook.yml, .vscode, .idea, .devcontainer, .claude, .claude.json, .mcp.json, .cursor, .envrc, .gitconfig, .bashrc, .bash_profile, .zshrc, .zprofile, .profile, .ripgreprc, Makefile]\n"},
		{name: "a raised ceiling", file: "limits:\n  memory: 64g\n", want: []string{"limits.memory:2"}},
		{name: "a lowered ceiling", file: "limits:\n  memory: 1g\n"},
		{name: "prune sooner", file: "prune:\n  idleHours: 1\n", want: []string{"prune.idleHours:2"}},
		{name: "prune later or never", file: "prune:\n  idleHours: 48\n  maxAgeDays: 0\n"},
		{name: "a sandbox section loosens its sandbox", file: "sandboxes:\n  web:\n    network: bridge\n", sandbox: "web", want: []string{"network:3"}},
		{name: "a sandbox section of another sandbox", file: "sandboxes:\n  web:\n    network: bridge\n", sandbox: "api"},
		{name: "egress destinations", file: "egress: [pypi.org, \"\\u0040debian\"]\n", want: []string{"egress[0]:1", "egress[1]:1"}, allows: "reach pypi.org through sbx's proxy"},
		{name: "egress the user allows already", file: "egress: [deb.debian.org, pypi.org, \"\\u0040debian\"]\n", userFile: "egress: [\"\\u0040debian\"]\n", want: []string{"egress[1]:1"}, allows: "reach pypi.org through"},
		{name: "fewer egress destinations", file: "egress: [deb.debian.org]\n", userFile: "egress: [\"\\u0040debian\"]\n"},
		{name: "env is the sandbox's own", file: "env: {FOO: bar}\nworkdir: /workspace/src\n"},
		{name: "a CA from the repository", file: "caCerts: ca.pem\n", want: []string{"caCerts:1"}, allows: "trust the CAs in "},
		{name: "the host's CAs", file: "caCerts: host\n", want: []string{"caCerts:1"}, allows: "read and change its HTTPS traffic"},
		{name: "no extra CAs", file: "caCerts: none\n", userFile: "caCerts: host\n"},

		// What the user's own layers say is not the file's doing.
		{name: "the user chose bridge too", file: "network: bridge\n", userFile: "network: bridge\n"},
		{name: "the user chose the host's CAs too", file: "caCerts: host\n", userFile: "caCerts: host\n"},
		{name: "a flag overrides the file", file: "network: bridge\n", flags: map[string]string{"network": "none"}},
		{name: "the user's ceiling", file: "memory: 4g\n", userFile: "limits:\n  memory: 2g\n", want: []string{"memory:1"}, allows: "limits.memory (2g)"},
		{name: "the user's own memory is above the ceiling", file: "memory: 12g\n", userFile: "memory: 16g\n"},
		{name: "the user's own profile", file: "memory: 2g\n", userFile: "profile: browser\n"},
		{name: "a flag's rw workspace", file: "memory: 2g\n", flags: map[string]string{"workspace": "rw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.name = tt.sandbox
			f.write("data/x", "x")
			f.write("allow.json", `{"defaultAction": "SCMP_ACT_ALLOW"}`)
			f.write("~/.bashrc", "echo hi\n")
			f.write("ca.pem", f.ca())
			f.write("~/.host-cas/corp.crt", f.ca())
			if tt.userFile != "" {
				f.userFile(tt.userFile)
			}
			for k, v := range tt.flags {
				f.flag(k, v)
			}
			f.projectFile(tt.file)
			r, err := f.resolve()
			if r == nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range r.Problems {
				if !p.Untrusted {
					t.Errorf("refused for another reason: %s", p)
					continue
				}
				if p.Source.File != filepath.Join(f.root, ProjectFileName) {
					t.Errorf("%s: source %s is not the project file", p.Key, p.Source)
				}
				got = append(got, p.Key+":"+itoa(p.Source.Line))
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("refused %v, want %v\n%v", got, tt.want, err)
			}
			if len(tt.want) > 0 && !strings.Contains(r.Problems[0].Reason, tt.allows) {
				t.Errorf("reason %q does not say %q", r.Problems[0].Reason, tt.allows)
			}
			if len(r.Loosenings) != len(tt.want) {
				t.Errorf("loosenings %v, refusals %v", r.Loosenings, got)
			}
			if r.Trust.State != TrustUntrusted {
				t.Errorf("trust %+v", r.Trust)
			}
			// Once trusted, the same file is accepted as written.
			f.trusted = true
			if r, err := f.resolve(); err != nil || r.Trust.State != TrustTrusted || len(r.Loosenings) != len(tt.want) {
				t.Errorf("trusted: %v, trust %+v, loosenings %v", err, r.Trust, r.Loosenings)
			}
		})
	}
}

func itoa(n int) string { return formatInt(int64(n)) }

// Every key says whether it can loosen the sandbox: a new key without a rule fails here.
func TestEveryKeyIsJudged(t *testing.T) {
	for _, k := range registry {
		if looseningRules[k.name] == nil {
			t.Errorf("key %s has no loosening rule", k.name)
		}
	}
	if len(looseningRules) != len(registry) {
		t.Errorf("%d rules for %d keys", len(looseningRules), len(registry))
	}
}

// A trusted file is untrusted again after any change, and says so; revoking works the same way.
func TestTrustFollowsTheContent(t *testing.T) {
	f := newFixture(t)
	f.projectFile("network: bridge\n")
	f.trusted = true
	r := f.mustResolve()
	if r.Trust.State != TrustTrusted || r.Config.Network != "bridge" || r.Trust.TrustedAt == nil {
		t.Fatalf("trusted: %+v, network %s", r.Trust, r.Config.Network)
	}
	f.trusted = false
	f.projectFile("network: bridge \n") // one byte more
	r, err := f.resolve()
	if r.Trust.State != TrustChanged || err == nil || !strings.Contains(err.Error(), "the project file changed since you trusted it on 2026-12-01") {
		t.Fatalf("after a change: %+v, %v", r.Trust, err)
	}
	if h := err.(*ValidationError).Hint(); !strings.Contains(h, `run "sbx trust"`) || !strings.Contains(h, f.root) {
		t.Errorf("hint %q", h)
	}
	if ok, err := f.store().Revoke(filepath.Join(f.root, ProjectFileName)); !ok || err != nil {
		t.Fatalf("revoke: %v %v", ok, err)
	}
	if r, _ := f.resolve(); r.Trust.State != TrustUntrusted {
		t.Errorf("after revoke: %+v", r.Trust)
	}
	// A file that loosens nothing needs no trust.
	f.projectFile("memory: 512m\n")
	if r, err := f.resolve(); err != nil || r.Trust.State != TrustUntrusted || len(r.Loosenings) != 0 {
		t.Errorf("tightening: %v %+v", err, r.Trust)
	}
}

// A trust store sbx cannot read trusts nothing, and says why.
func TestUnreadableTrustStore(t *testing.T) {
	f := newFixture(t)
	f.projectFile("network: bridge\n")
	f.write("~/.state/sbx/trust.json", "{not json")
	r, err := f.resolve()
	if err == nil || r.Trust.State != TrustUntrusted || !strings.Contains(r.Trust.Error, "not valid JSON") {
		t.Fatalf("%v %+v", err, r.Trust)
	}
}

// The ceilings' defaults never exceed the machine.
func TestCeilingsFollowTheMachine(t *testing.T) {
	f := newFixture(t)
	f.hostCPUs = 1
	in := f.inputs()
	in.HostMemory = 3 << 30
	r, err := Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Limits.CPUs != 1 || r.Config.Limits.Memory != 3<<30 || r.Sources["limits.memory"].Note != "this machine's memory" {
		t.Errorf("limits %+v, source %s", r.Config.Limits, r.Sources["limits.memory"])
	}
	f.userFile("limits:\n  memory: 64g\n")
	r, _ = Resolve(f.inputs())
	if r.Config.Limits.Memory != 64<<30 {
		t.Errorf("the user's own ceiling: %s", FormatSize(r.Config.Limits.Memory))
	}
}

func TestSectionsAreListed(t *testing.T) {
	f := newFixture(t)
	f.projectFile("sandboxes:\n  web: {memory: 2g}\n  api:\n")
	if got := strings.Join(f.mustResolve().ProjectSections(), ","); got != "web,api" {
		t.Errorf("sections %q", got)
	}
}

func TestHugeConfigFileIsRefused(t *testing.T) {
	f := newFixture(t)
	f.projectFile("# " + strings.Repeat("x", maxConfigFile) + "\n")
	_, err := f.resolve()
	if err == nil || !strings.Contains(err.Error(), "larger than 1m") {
		t.Fatalf("%v", err)
	}
}

// In a rw workspace, a seccomp profile kept in the project is protected like .sbx.yaml.
func TestSeccompProfileInTheProjectIsProtected(t *testing.T) {
	f := newFixture(t)
	f.write("sec/profile.json", "{}")
	f.userFile("seccompProfile: " + f.path("sec/profile.json") + "\nworkspace: rw\n")
	r := f.mustResolve()
	n := len(r.Config.ProtectedPaths)
	if r.Config.ProtectedPaths[n-1] != "sec/profile.json" || r.Sources[fmt.Sprintf("protectedPaths[%d]", n-1)].Note != "the seccomp profile" {
		t.Errorf("protected %v", r.Config.ProtectedPaths)
	}
}

func TestProtectedPathsAreRelative(t *testing.T) {
	for _, bad := range []string{"/etc", "../x", "a/../../b", ".", "", "a//b"} {
		f := newFixture(t)
		f.userFile("protectedPaths: ['" + bad + "']\n")
		if _, err := f.resolve(); err == nil || !strings.Contains(err.Error(), "protectedPaths[0]") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Trust covers what the trusted file points to inside the project, not only its text: a
// CA file the repository (or a rw sandbox) rewrites after the user trusted the config is
// refused like a changed config, with the way back.
func TestTrustCoversTheFilesItPointsTo(t *testing.T) {
	f := newFixture(t)
	f.projectFile("caCerts: ./ca.pem\n")
	f.write("ca.pem", f.ca())
	f.trusted = true
	if r := f.mustResolve(); r.Trust.State != TrustTrusted || len(r.CACertsPEM()) == 0 {
		t.Fatalf("trusted: %+v", r.Trust)
	}
	f.trusted = false
	if r := f.mustResolve(); r.Trust.State != TrustTrusted {
		t.Fatalf("unchanged, resolved again: %+v", r.Trust)
	}
	rec, _, _ := f.store().Lookup(filepath.Join(f.root, ProjectFileName))
	if len(rec.Files) != 1 || rec.Files[0].Key != "caCerts" || !FilesAsTrusted(rec) {
		t.Fatalf("the record: %+v", rec)
	}
	f.write("ca.pem", string(cacertstest.CA(t, "attacker CA")))
	if FilesAsTrusted(rec) {
		t.Error("the record still matches the changed ca.pem")
	}
	r, err := f.resolve()
	var verr *ValidationError
	if !errors.As(err, &verr) || r.Trust.State != TrustChanged {
		t.Fatalf("after ca.pem changed: %+v, %v", r.Trust, err)
	}
	if p := verr.Problems[0]; p.Key != "caCerts" || !strings.Contains(p.Reason, "ca.pem, which the project file points to, changed since you trusted it") {
		t.Errorf("problem %+v", p)
	}
	if h := verr.Hint(); !strings.Contains(h, `run "sbx trust"`) {
		t.Errorf("hint %q", h)
	}
	// Trusting again takes the new content.
	f.trusted = true
	if r := f.mustResolve(); r.Trust.State != TrustTrusted {
		t.Fatalf("trusted again: %+v", r.Trust)
	}
}

// The same for a seccomp profile kept in the project, whatever the workspace mode.
func TestTrustCoversTheSeccompProfile(t *testing.T) {
	f := newFixture(t)
	f.projectFile("seccompProfile: @/filter.json\n")
	f.write("filter.json", `{"defaultAction": "SCMP_ACT_ERRNO"}`)
	f.trusted = true
	if r := f.mustResolve(); r.Trust.State != TrustTrusted {
		t.Fatalf("trusted: %+v", r.Trust)
	}
	f.trusted = false
	f.write("filter.json", `{"defaultAction": "SCMP_ACT_ALLOW"}`)
	r, err := f.resolve()
	if err == nil || r.Trust.State != TrustChanged || r.Trust.ChangedFile != "filter.json" ||
		!strings.Contains(err.Error(), "filter.json, which the project file points to, changed since you trusted it") {
		t.Fatalf("after filter.json changed: %+v, %v", r.Trust, err)
	}
}
