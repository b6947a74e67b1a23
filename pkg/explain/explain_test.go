package explain

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/protect"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// The golden files show a project at /home/dev/app with its home at /home/dev, wherever the
// test's temp dirs really are.
const (
	goldenRoot = "/home/dev/app"
	goldenHome = "/home/dev"
)

type scenario struct {
	project string            // .sbx.yaml; "@" is the project root
	env     map[string]string // environment
	flags   []config.Setting
	opts    Options
	trusted bool // the user trusted the project file
}

func resolve(t *testing.T, sc scenario) *config.Resolved {
	t.Helper()
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home, root := filepath.Join(tmp, "h"), filepath.Join(tmp, "p")
	for _, d := range []string{home, filepath.Join(root, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if sc.project != "" {
		if err := os.WriteFile(filepath.Join(root, config.ProjectFileName), []byte(strings.ReplaceAll(sc.project, "@", root)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := &config.TrustStore{Path: filepath.Join(home, "trust.json"), Now: func() time.Time { return time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC) }}
	if sc.trusted {
		file := filepath.Join(root, config.ProjectFileName)
		sum, err := config.FileHash(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Trust(file, sum); err != nil {
			t.Fatal(err)
		}
	}
	r, err := config.Resolve(config.Inputs{
		Trust:       store,
		Getenv:      func(k string) string { return sc.env[k] },
		HomeDir:     func() (string, error) { return home, nil },
		WorkingDir:  func() (string, error) { return root, nil },
		Flags:       sc.flags,
		HostCPUs:    4,
		GitTopLevel: func(string) (string, bool) { return "", false },
		FileOwner:   func(string) (int, int, error) { return 1000, 1000, nil },
	})
	if r == nil {
		t.Fatalf("resolve: %v", err)
	}
	relocate(r, strings.NewReplacer(root, goldenRoot, home, goldenHome))
	return r
}

// relocate rewrites the temp paths in r so golden output is stable.
func relocate(r *config.Resolved, rep *strings.Replacer) {
	r.ProjectRoot, r.WorkingDir = rep.Replace(r.ProjectRoot), rep.Replace(r.WorkingDir)
	r.Name = config.DefaultName(r.ProjectRoot)
	for i := range r.Files {
		r.Files[i].Path = rep.Replace(r.Files[i].Path)
	}
	for k, s := range r.Sources {
		s.File = rep.Replace(s.File)
		r.Sources[k] = s
	}
	if r.Trust.File != "" {
		// The content holds the temp path, so its hash changes from run to run.
		r.Trust.File, r.Trust.SHA256 = rep.Replace(r.Trust.File), strings.Repeat("5b", 32)
	}
	for i := range r.Loosenings {
		l := &r.Loosenings[i]
		l.Source.File, l.Value, l.Allows = rep.Replace(l.Source.File), rep.Replace(l.Value), rep.Replace(l.Allows)
	}
	for i := range r.Config.Binds {
		r.Config.Binds[i].Source = rep.Replace(r.Config.Binds[i].Source)
	}
	for _, list := range [][]config.Problem{r.Problems, r.Warnings} {
		for i := range list {
			p := &list[i]
			p.Source.File, p.Value, p.Reason, p.Fix = rep.Replace(p.Source.File), rep.Replace(p.Value), rep.Replace(p.Reason), rep.Replace(p.Fix)
		}
	}
}

var scenarios = map[string]scenario{
	"default": {},
	"weakened": {
		project: `profile: common
image: example/tools:1
workspace: rw
user: "0"
network: bridge
memory: 8m
capAdd: [NET_BIND_SERVICE]
env:
  API_TOKEN: s3cr3t
binds: ['@/data:/workspace/data:ro']
dangerouslyAllowReservedTargets: true
tools:
  deny: []
`,
		env:   map[string]string{"SBX_TIMEOUT": "30m"},
		flags: []config.Setting{{Key: "cpus", Values: []string{"2"}, Source: config.Source{Layer: config.LayerFlag, Name: "--cpus"}}},
		opts: Options{Tool: "browser", Live: &Live{Reachable: true, Exists: true, Running: true, Status: "Up 3 minutes",
			DifferingKeys: []string{"memory", "network"}, ApplyCommand: "sbx create --replace",
			Commands: "engine exec", CommandsWhy: "the engine cannot see this machine's files (a remote engine, or not Linux), so sbx cannot reach an agent's socket", Toolbox: true}},
		trusted: true,
	},
	"untrusted": {project: "network: bridge\nmemory: 4g\npassEnv: [GITHUB_TOKEN]\nprofile: browser\n",
		opts: Options{Live: &Live{Reachable: true, Kind: "rootless Podman 4.3.1 (cgroup v1)", LimitsProblem: "rootless Podman 4.3.1 (cgroup v1) cannot apply memory, CPU or pids limits: a rootless engine needs cgroup v2 for them", Commands: "agent"}}},
	"podmanegress": {project: "egress: [deb.debian.org]\n",
		opts: Options{Live: &Live{Reachable: true, Kind: "rootful Podman 4.3.1 (cgroup v2)", Commands: "agent",
			EgressPath: "the proxy's socket, which sbx's agent relays 127.0.0.1:3128 to: the sandbox has no network (a rootful Podman's networks give this machine an address on them)"}}},
	"unreachable": {opts: Options{Live: &Live{Error: "cannot reach the Docker engine at unix:///var/run/docker.sock"}}},
	"pooled": {project: "workspace: none\npool: 2\n", trusted: true,
		opts: Options{Live: &Live{Reachable: true, Commands: "agent", Pool: &Pool{Size: 2, Ready: 1, Key: "0123456789abcdef"}}}},
	"notpooled": {env: map[string]string{"SBX_POOL": "1"},
		opts: Options{Live: &Live{Reachable: true, Commands: "agent", Pool: &Pool{Size: 1, NotPooled: "workspace ro mounts the project, which a container cannot change once made; only workspace none is pooled"}}}},
}

func TestGolden(t *testing.T) {
	for name, sc := range scenarios {
		r := resolve(t, sc)
		rep := Build(r, sc.opts)
		for _, form := range []string{"tty", "plain", "json"} {
			t.Run(name+"."+form, func(t *testing.T) {
				var buf bytes.Buffer
				var err error
				switch form {
				case "tty":
					err = WriteText(&buf, rep, TextOptions{TTY: true, Color: true})
				case "plain":
					err = WriteText(&buf, rep, TextOptions{})
				case "json":
					err = WriteJSON(&buf, rep)
				}
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(buf.String(), "s3cr3t") {
					t.Error("a secret value is printed")
				}
				golden(t, filepath.Join("testdata", name+"."+form+".golden"), buf.Bytes())
			})
		}
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/explain -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test ./pkg/explain -update and review the diff):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestBuild(t *testing.T) {
	sc := scenarios["weakened"]
	rep := Build(resolve(t, sc), sc.opts)
	if rep.Valid || len(rep.Problems) != 2 {
		t.Errorf("valid = %v, problems = %+v", rep.Valid, rep.Problems)
	}
	if q := rep.Tools.Query; q == nil || q.Allowed || q.Key != "tools.allow" || !strings.Contains(q.Fix, `add "browser" to tools.allow`) {
		t.Errorf("query = %+v", q)
	}
	if rep.Config.Env["API_TOKEN"] != config.Masked {
		t.Errorf("config env not masked: %v", rep.Config.Env)
	}
	var home Setting
	for _, s := range rep.Settings {
		if s.Key == "env.HOME" {
			home = s
		}
	}
	if home.Value != "/home/sandbox" || home.Source != "profile:common" {
		t.Errorf("env.HOME = %+v", home)
	}
	if !rep.Engine.Checked || rep.Engine.HashMatches {
		t.Errorf("engine = %+v", rep.Engine)
	}
}

// The JSON field names are a contract: renaming one breaks scripts.
func TestJSONFieldNames(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Build(resolve(t, scenarios["weakened"]), scenarios["weakened"].opts)); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sandbox", "files", "settings", "posture", "valid", "problems", "warnings", "tools", "engine", "config"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in the JSON", k)
		}
	}
	engine := m["engine"].(map[string]any)
	for _, k := range []string{"checked", "reachable", "exists", "running", "status", "hashMatches", "differingKeys", "applyCommand"} {
		if _, ok := engine[k]; !ok {
			t.Errorf("no engine.%s in the JSON", k)
		}
	}
}

func TestWriteCheck(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteCheck(&buf, Build(resolve(t, scenario{}), Options{}), TextOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "is valid") {
		t.Errorf("check output:\n%s", buf.String())
	}
	buf.Reset()
	sc := scenarios["weakened"]
	if err := WriteCheck(&buf, Build(resolve(t, sc), Options{}), TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"is refused: 2 problems", `memory "8m": below the minimum of 16m`, "fix: set memory to 16m or more"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, buf.String())
		}
	}
}

// What a rw workspace keeps read-only is listed, pins left out; a refusal is shown instead.
func TestProtectedPaths(t *testing.T) {
	r := resolve(t, scenario{})
	plan := &protect.Plan{Root: goldenRoot, Mounts: []protect.Mount{
		{Path: ".git", Reason: "pinned: on the way to .git/hooks"},
		{Path: ".git/hooks", ReadOnly: true, Reason: "protectedPaths entry .git/hooks"},
	}, Warnings: []string{"stopped looking after 100000 directory entries"}}
	var buf bytes.Buffer
	rep := Build(r, Options{Protected: &Protected{Plan: plan}})
	if err := WriteText(&buf, rep, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"Protected paths (read-only over the rw workspace)\n  .git/hooks  protectedPaths entry .git/hooks\n", "warning  stopped looking"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "pinned") {
		t.Errorf("a pin is listed:\n%s", out)
	}
	buf.Reset()
	rep = Build(r, Options{Protected: &Protected{Error: ".vscode is a symbolic link"}})
	if err := WriteJSON(&buf, rep); err != nil || !strings.Contains(buf.String(), `"protected": {
    "error": ".vscode is a symbolic link"`) {
		t.Errorf("json: %v\n%s", err, buf.String())
	}
}

func TestEgress(t *testing.T) {
	flags := []config.Setting{{Key: "egress", Values: []string{"pypi.org", "@debian"}, Source: config.Source{Layer: config.LayerFlag, Name: "--egress"}}}
	rep := Build(resolve(t, scenario{flags: flags}), Options{})
	want := []EgressRule{{Rule: "pypi.org"}, {Rule: "deb.debian.org", Preset: "@debian"}, {Rule: "security.debian.org", Preset: "@debian"}}
	if !reflect.DeepEqual(rep.Egress.Rules, want) || rep.Egress.Source != "flag:--egress" {
		t.Errorf("egress = %+v, want rules %+v from flag:--egress", rep.Egress, want)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, rep, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"  pypi.org                      flag:--egress\n", "  security.debian.org  @debian  flag:--egress\n", "  egress[1]  "} {
		if !strings.Contains(buf.String(), line) {
			t.Errorf("no %q in:\n%s", line, buf.String())
		}
	}
}
