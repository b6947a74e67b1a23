package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestResolveLayers(t *testing.T) {
	type check struct{ key, value, source string }
	tests := []struct {
		name   string
		setup  func(f *fixture)
		checks []check
	}{
		{
			name: "built-in defaults",
			checks: []check{
				{"mode", "all", "default"},
				{"profile", "sandbox", "default"},
				{"image", images.SandboxTag, "profile:sandbox"},
				{"workspace", "ro", "default"},
				{"user", "1000:1000", "default"},
				{"memory", "1g", "default"},
				{"memorySwap", "1g", "default (same as memory)"},
				{"network", "none", "default"},
				{"pidsLimit", "256", "default"},
				{"timeout", "10m", "default"},
				{"env.LANG", "C.UTF-8", "default"},
				{"tmpfs[0]", "/tmp:size=256m,nosuid,nodev,noexec", "default"},
				{"tools.deny", "[browser, apply, ports]", "default"},
				{"prune.idleHours", "24", "default"},
			},
		},
		{
			name:   "user file over defaults",
			setup:  func(f *fixture) { f.userFile("memory: 2g\n") },
			checks: []check{{"memory", "2g", "user:~/.config/sbx/config.yaml:1"}, {"memorySwap", "2g", "default (same as memory)"}},
		},
		{
			name: "project file over user file",
			setup: func(f *fixture) {
				f.userFile("memory: 2g\ncpus: 2\n")
				f.projectFile("# comment\nmemory: 512m\n")
			},
			checks: []check{{"memory", "512m", "project:@/.sbx.yaml:2"}, {"cpus", "2", "user:~/.config/sbx/config.yaml:2"}},
		},
		{
			name: "config file over project file",
			setup: func(f *fixture) {
				f.projectFile("memory: 512m\n")
				f.configFile = f.write("extra/ci.yaml", "\nmemory: 768m\n")
			},
			checks: []check{{"memory", "768m", "config:@/extra/ci.yaml:2"}},
		},
		{
			name: "env over files",
			setup: func(f *fixture) {
				f.projectFile("memory: 512m\nnetwork: bridge\n")
				f.env["SBX_MEMORY"] = "3g"
			},
			checks: []check{{"memory", "3g", "env:SBX_MEMORY"}, {"network", "bridge", "project:@/.sbx.yaml:2"}},
		},
		{
			name: "maxRunning and evict",
			setup: func(f *fixture) {
				f.projectFile("maxRunning: 3\n")
				f.env["SBX_EVICT"] = "stop"
			},
			checks: []check{{"maxRunning", "3", "project:@/.sbx.yaml:1"}, {"evict", "stop", "env:SBX_EVICT"}},
		},
		{
			name:   "maxRunning from the environment, evict by default",
			setup:  func(f *fixture) { f.env["SBX_MAX_RUNNING"] = "5" },
			checks: []check{{"maxRunning", "5", "env:SBX_MAX_RUNNING"}, {"evict", "pause", "default"}},
		},
		{
			name: "flags over env",
			setup: func(f *fixture) {
				f.env["SBX_MEMORY"] = "3g"
				f.env["SBX_PIDS_LIMIT"] = "100"
				f.flag("memory", "4g")
			},
			checks: []check{{"memory", "4g", "flag:--memory"}, {"pidsLimit", "100", "env:SBX_PIDS_LIMIT"}},
		},
		{
			name: "env maps merge by name across layers",
			setup: func(f *fixture) {
				f.userFile("env:\n  A: user\n  B: user\n")
				f.projectFile("env:\n  B: project\n")
				f.flag("env", "C=flag", "LANG=en_US.UTF-8")
			},
			checks: []check{
				{"env.A", "user", "user:~/.config/sbx/config.yaml:2"},
				{"env.B", "project", "project:@/.sbx.yaml:2"},
				{"env.C", "flag", "flag:--env"},
				{"env.LANG", "en_US.UTF-8", "flag:--env"},
			},
		},
		{
			name: "tmpfs and binds concatenate, same path or target replaces",
			setup: func(f *fixture) {
				f.mkdir("data")
				f.mkdir("cache")
				f.userFile("tmpfs:\n  - /cache:size=64m\n")
				f.projectFile("tmpfs:\n  - /tmp:size=1g,exec\nbinds:\n  - @/data:/data:ro\n")
				f.flag("binds", "@/cache:/cache2")
			},
			checks: []check{
				{"tmpfs[0]", "/tmp:size=1g,exec,nosuid,nodev", "project:@/.sbx.yaml:2"},
				{"tmpfs[1]", "/var/tmp:size=256m,nosuid,nodev,noexec", "default"},
				{"tmpfs[3]", "/cache:size=64m,nosuid,nodev,noexec", "user:~/.config/sbx/config.yaml:2"},
				{"binds[0]", "@/data:/data:ro", "project:@/.sbx.yaml:4"},
				{"binds[1]", "@/cache:/cache2", "flag:--binds"},
			},
		},
		{
			name: "other lists are replaced by the higher layer",
			setup: func(f *fixture) {
				f.userFile("tools:\n  deny: [browser, write]\n")
				f.projectFile("tools:\n  deny:\n    - write\n")
			},
			checks: []check{{"tools.deny", "[write]", "project:@/.sbx.yaml:2"}, {"tools.allow", "[exec, read, write]", "default"}},
		},
		{
			name: "sandbox section overrides the file's top level for that name",
			setup: func(f *fixture) {
				f.name = "web"
				f.projectFile("memory: 512m\nsandboxes:\n  web:\n    memory: 2g\n  api:\n    memory: 3g\n")
			},
			checks: []check{{"memory", "2g", "project:@/.sbx.yaml:4"}},
		},
		{
			name: "another sandbox's section does not apply",
			setup: func(f *fixture) {
				f.projectFile("memory: 512m\nsandboxes:\n  web:\n    memory: 2g\n")
			},
			checks: []check{{"memory", "512m", "project:@/.sbx.yaml:1"}},
		},
		{
			name:  "profile layer sits between defaults and files",
			setup: func(f *fixture) { f.projectFile("profile: common\nmemory: 3g\n") },
			checks: []check{
				{"profile", "common", "project:@/.sbx.yaml:1"},
				{"image", images.CommonTag, "profile:common"},
				{"memory", "3g", "project:@/.sbx.yaml:2"},
				{"pidsLimit", "1024", "profile:common"},
				{"env.HOME", "/home/sandbox", "profile:common"},
				{"env.GOCACHE", "/home/sandbox/.cache/go-build", "profile:common"},
				{"env.CARGO_TARGET_DIR", "/home/sandbox/.cargo/target", "profile:common"},
				{"env.npm_config_cache", "/home/sandbox/.npm", "profile:common"},
				{"tmpfs[3]", "/home/sandbox:size=1g,uid=1000,gid=1000,mode=0755,exec,nosuid,nodev", "profile:common"},
			},
		},
		{
			name:  "profile chosen by a flag; browser needs a network that publishes ports",
			setup: func(f *fixture) { f.flag("profile", "browser") },
			checks: []check{
				{"image", images.BrowserTag, "profile:browser"},
				{"network", "bridge", "profile:browser"},
				{"shmSize", "512m", "profile:browser"},
				{"memory", "2g", "profile:browser"},
			},
		},
		{
			name: "an explicit image beats the profile's",
			setup: func(f *fixture) {
				f.userFile("image: example/img:1\n")
				f.env["SBX_PROFILE"] = "common"
			},
			checks: []check{{"image", "example/img:1", "user:~/.config/sbx/config.yaml:1"}, {"profile", "common", "env:SBX_PROFILE"}},
		},
		{
			name:   "explicit swap",
			setup:  func(f *fixture) { f.projectFile("memory: 1g\nmemorySwap: 1.5g\n") },
			checks: []check{{"memorySwap", "1536m", "project:@/.sbx.yaml:2"}},
		},
		{
			name:   "rw defaults the user to the project root's owner",
			setup:  func(f *fixture) { f.flag("workspace", "rw") },
			checks: []check{{"user", "1234:5678", "default (owner of the project root)"}},
		},
		{
			name:   "an explicit user wins in rw, and root is normalised",
			setup:  func(f *fixture) { f.projectFile("workspace: rw\nuser: root\n") },
			checks: []check{{"user", "0:0", "project:@/.sbx.yaml:2"}},
		},
		{
			name:   "capability spellings are normalised",
			setup:  func(f *fixture) { f.projectFile("capAdd: [cap_net_bind_service]\n") },
			checks: []check{{"capAdd", "[NET_BIND_SERVICE]", "project:@/.sbx.yaml:1"}},
		},
		{
			name:   "per-element sources of replaced lists",
			setup:  func(f *fixture) { f.projectFile("tools:\n  allow:\n    - exec\n    - re*\n") },
			checks: []check{{"tools.allow[1]", "", "project:@/.sbx.yaml:4"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if tt.setup != nil {
				tt.setup(f)
			}
			// Layering is the same for any file; what an untrusted one may say is TestLoosening's.
			_, err := os.Stat(filepath.Join(f.root, ProjectFileName))
			f.trusted = err == nil
			r := f.mustResolve()
			for _, c := range tt.checks {
				want := strings.NewReplacer("~", f.home, "@", f.root).Replace(c.source)
				if got := r.Sources[c.key].String(); got != want {
					t.Errorf("source of %s = %q, want %q", c.key, got, want)
				}
				if c.value == "" {
					continue
				}
				if got, want := value(r, c.key), strings.ReplaceAll(c.value, "@", f.root); got != want {
					t.Errorf("%s = %q, want %q", c.key, got, want)
				}
			}
		})
	}
}

func TestResolveFilesConsidered(t *testing.T) {
	f := newFixture(t)
	f.projectFile("")
	f.env["XDG_CONFIG_HOME"] = filepath.Join(f.home, "xdg")
	r := f.mustResolve()
	want := []File{
		{Layer: LayerUser, Path: filepath.Join(f.home, "xdg", "sbx", "config.yaml"), Found: false},
		{Layer: LayerProject, Path: filepath.Join(f.root, ProjectFileName), Found: true},
	}
	if len(r.Files) != len(want) {
		t.Fatalf("files = %+v, want %+v", r.Files, want)
	}
	for i := range want {
		if r.Files[i] != want[i] {
			t.Errorf("file %d = %+v, want %+v", i, r.Files[i], want[i])
		}
	}
	if r.ProjectRoot != f.root || r.ProjectRootFrom != RootFromFile {
		t.Errorf("root = %s from %s", r.ProjectRoot, r.ProjectRootFrom)
	}
	if !r.IsDefaultName || r.Name != DefaultName(f.root) || r.ContainerName() != "sbx-"+r.Name {
		t.Errorf("name = %q (default %v)", r.Name, r.IsDefaultName)
	}
}

func TestResolveMissingConfigFile(t *testing.T) {
	f := newFixture(t)
	f.configFile = "nope.yaml"
	_, err := f.resolve()
	var verr *ValidationError
	if !errors.As(err, &verr) || !strings.Contains(err.Error(), "config file not found") || !strings.Contains(err.Error(), filepath.Join(f.root, "nope.yaml")) {
		t.Fatalf("err = %v", err)
	}
	if errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("exit code = %d", errs.ExitCode(err))
	}
}

func TestResolveInvalidName(t *testing.T) {
	f := newFixture(t)
	f.name = "Bad Name"
	_, err := f.resolve()
	if err == nil || errs.ExitCode(err) != errs.CodeUsage || !strings.Contains(err.Error(), `invalid sandbox name "Bad Name"`) {
		t.Fatalf("err = %v (code %d)", err, errs.ExitCode(err))
	}
}

func TestResolveReturnsRefusedConfig(t *testing.T) {
	f := newFixture(t)
	f.projectFile("memory: 8m\n")
	r, err := f.resolve()
	var verr *ValidationError
	if !errors.As(err, &verr) || r == nil {
		t.Fatalf("r = %v, err = %v", r, err)
	}
	if r.Config.Memory != 8<<20 {
		t.Errorf("memory = %d; the refused value should still be visible to explain", r.Config.Memory)
	}
}

func TestFindProjectRoot(t *testing.T) {
	base := canonical(t.TempDir())
	mk := func(p string) string {
		full := filepath.Join(base, p)
		if err := os.MkdirAll(full, 0o755); err != nil {
			t.Fatal(err)
		}
		return full
	}
	repo := mk("repo")
	mk("repo/.git")
	sub := mk("repo/app/src")
	if err := os.WriteFile(filepath.Join(repo, "app", ProjectFileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	plain := mk("plain/dir")
	tests := []struct {
		name, wd, project string
		want, from        string
	}{
		{"--project wins", sub, "../..", repo, RootFromFlag},
		{"nearest .sbx.yaml", sub, "", filepath.Join(repo, "app"), RootFromFile},
		{"git top-level", filepath.Join(repo), "", repo, RootFromGit},
		{"working directory", plain, "", plain, RootFromWorkDir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, from, _, err := FindProjectRoot(tt.wd, tt.project, Discovery{})
			if err != nil || got != tt.want || from != tt.from {
				t.Errorf("got %s from %s (%v), want %s from %s", got, from, err, tt.want, tt.from)
			}
		})
	}
	if _, _, _, err := FindProjectRoot(plain, "missing", Discovery{}); err == nil {
		t.Error("a missing --project dir is accepted")
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(plain, link); err != nil {
		t.Fatal(err)
	}
	if got, _, _, _ := FindProjectRoot(link, "", Discovery{}); got != plain {
		t.Errorf("root through a symlink = %s, want %s", got, plain)
	}
}

func TestGitTopLevelWorktreeFile(t *testing.T) {
	dir := canonical(t.TempDir())
	if err := os.WriteFile(filepath.Join(dir, ".git"), []byte("gitdir: /elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, ok := GitTopLevel(sub); !ok || got != dir {
		t.Errorf("GitTopLevel = %s, %v", got, ok)
	}
}

func TestDefaultName(t *testing.T) {
	a, b := DefaultName("/home/u/work/app"), DefaultName("/home/u/other/app")
	if a == b {
		t.Errorf("two projects called app share the name %s", a)
	}
	if !strings.HasPrefix(a, "app-") || len(a) != len("app-")+6 {
		t.Errorf("name = %s", a)
	}
	if DefaultName("/home/u/work/app") != a {
		t.Error("the name is not stable")
	}
	for _, root := range []string{"/", "/x/My Project!", "/x/" + strings.Repeat("Long_Name.", 10), "/x/---", "/x/Ünïcode"} {
		n := DefaultName(root)
		if err := ValidName(n); err != nil {
			t.Errorf("DefaultName(%q) = %q: %v", root, n, err)
		}
	}
	if got := DefaultName("/x/My Project!"); !strings.HasPrefix(got, "my-project-") {
		t.Errorf("slug = %s", got)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "web", "api-2", "x.y_z", "0", strings.Repeat("a", 63)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "A", "a b", "a/b", strings.Repeat("a", 64), "é"} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		}
	}
}

// In rw mode the sandbox runs as the project's owner, and the profile's home must be theirs.
func TestProfileHomeBelongsToTheSandboxUser(t *testing.T) {
	f := newFixture(t)
	f.write(".sbx.yaml", "profile: common\nworkspace: rw\n")
	f.trusted = true
	r := f.mustResolve()
	if r.Config.User != "1234:5678" {
		t.Fatalf("user %q, want the project owner 1234:5678", r.Config.User)
	}
	var home []string
	for _, tm := range r.Config.Tmpfs {
		if tm.Path == "/home/sandbox" {
			home = tm.Options
		}
	}
	got := strings.Join(home, ",")
	if !strings.Contains(got, "uid=1234") || !strings.Contains(got, "gid=5678") || strings.Contains(got, "uid=1000") {
		t.Errorf("home tmpfs options %q", got)
	}
	// An explicit user keeps the home too; the default user leaves the profile's 1000.
	f.write(".sbx.yaml", "profile: common\n")
	if got := strings.Join(f.mustResolve().Config.Tmpfs[3].Options, ","); !strings.Contains(got, "uid=1000,gid=1000") {
		t.Errorf("default user: %q", got)
	}
}

// A relative caCerts path starts at the directory of the file that sets it; from the
// environment, at the working directory (the project root here).
func TestCACertsResolve(t *testing.T) {
	for _, tt := range []struct {
		name string
		cert string            // where a certificate is written; "@" is the project root
		file map[string]string // config files by path (@/.sbx.yaml, ~/.config/sbx/config.yaml, ~/other/sbx.yaml)
		env  string            // SBX_CA_CERTS
		want string            // the value resolved; $H is the home
		src  string            // where explain says it came from
	}{
		{name: "none by default", want: "", src: "default"},
		{name: "a file of the project", cert: "certs/corp.pem", file: map[string]string{ProjectFileName: "caCerts: certs/corp.pem\n"},
			want: "@/certs/corp.pem", src: "project:@/.sbx.yaml:1"},
		{name: "a directory beside the user's file", cert: "~/.config/sbx/cas/corp.crt", file: map[string]string{"~/.config/sbx/config.yaml": "memory: 2g\ncaCerts: cas\n"},
			want: "$H/.config/sbx/cas", src: "user:$H/.config/sbx/config.yaml:2"},
		{name: "beside the --config file", cert: "~/other/corp.pem", file: map[string]string{"~/other/sbx.yaml": "caCerts: ./corp.pem\n"},
			want: "$H/other/corp.pem", src: "config:$H/other/sbx.yaml:1"},
		{name: "SBX_CA_CERTS from the working directory", cert: "corp.pem", env: "corp.pem", want: "@/corp.pem", src: "env:SBX_CA_CERTS"},
		{name: "an absolute path", cert: "~/corp.pem", env: "$H/corp.pem", want: "$H/corp.pem", src: "env:SBX_CA_CERTS"},
		{name: "host", cert: "~/.host-cas/corp.crt", file: map[string]string{"~/.config/sbx/config.yaml": "caCerts: Host\n"},
			want: "host", src: "user:$H/.config/sbx/config.yaml:1"},
		{name: "none turns the user's off", cert: "~/.host-cas/corp.crt", file: map[string]string{"~/.config/sbx/config.yaml": "caCerts: host\n", ProjectFileName: "caCerts: none\n"},
			want: "", src: "project:@/.sbx.yaml:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			repl := strings.NewReplacer("@", f.root, "$H", f.home)
			if tt.cert != "" {
				f.write(tt.cert, f.ca())
			}
			for p, content := range tt.file {
				if full := f.write(p, content); strings.HasPrefix(p, "~/other/") {
					f.configFile = full
				}
			}
			if tt.env != "" {
				f.env["SBX_CA_CERTS"] = repl.Replace(tt.env)
			}
			_, err := os.Stat(filepath.Join(f.root, ProjectFileName))
			f.trusted = err == nil
			r := f.mustResolve()
			if got, want := r.Config.CACerts, repl.Replace(tt.want); got != want {
				t.Errorf("caCerts = %q, want %q", got, want)
			}
			if got, want := r.Source("caCerts").String(), repl.Replace(tt.src); got != want {
				t.Errorf("source %q, want %q", got, want)
			}
			if got := string(r.CACertsPEM()); (tt.want != "") != (got == f.ca()) {
				t.Errorf("certificates read: %q", got)
			}
			var posture []string
			for _, p := range Posture(r) {
				if p.Key == "caCerts" {
					posture = append(posture, p.Level+": "+p.Detail)
				}
			}
			if tt.want != "" && (len(posture) != 1 || !strings.HasPrefix(posture[0], LevelWeak+": tools trust the CAs")) || tt.want == "" && posture != nil {
				t.Errorf("posture: %q", posture)
			}
		})
	}
}
