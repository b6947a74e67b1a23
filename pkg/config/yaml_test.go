package config

import (
	"strings"
	"testing"
)

func TestStrictLoading(t *testing.T) {
	tests := []struct {
		name, file string
		want       []string // substrings of the single problem's String() and Fix
	}{
		{"unknown key with suggestion", "memory: 1g\nmemroy: 2g\n", []string{":2: memroy: unknown key; did you mean \"memory\"?", `rename it to "memory"`}},
		{"case and separator mistakes", "pids_limit: 300\n", []string{":1: pids_limit: unknown key; did you mean \"pidsLimit\"?"}},
		{"nested key at the top level", "idleHours: 3\n", []string{`did you mean "prune.idleHours"?`}},
		{"unknown nested key", "prune:\n  idleHour: 3\n", []string{":2: prune.idleHour: unknown key in prune; did you mean \"prune.idleHours\"?"}},
		{"no key for privileged mode", "privileged: true\n", []string{":1: privileged: unknown key: sbx never runs privileged containers"}},
		{"no-new-privileges cannot be turned off", "noNewPrivileges: false\n", []string{"always on and cannot be turned off"}},
		{"unknown key without suggestion", "zzzzzz: 1\n", []string{":1: zzzzzz: unknown key", "sbx config schema"}},
		{"unknown key in a sandbox section", "sandboxes:\n  web:\n    netwrk: none\n", []string{":3: netwrk: unknown key; did you mean \"network\"?"}},
		{"wrong type: list for a size", "memory: [1, 2]\n", []string{":1: memory", "expected a single size value, got a list", "write it as memory: 2g"}},
		{"wrong type: string for a bool", "init: yes\n", []string{`:1: init "yes": "yes" is not true or false`}},
		{"wrong type: string for an int", "pidsLimit: lots\n", []string{`"lots" is not a whole number`}},
		{"wrong type: scalar for a list", "capDrop: ALL\n", []string{"expected a list, got a string value"}},
		{"wrong type: group is not a mapping", "prune: 3\n", []string{"expected a mapping of idleHours, maxAgeDays"}},
		{"bad size", "memory: lots\n", []string{`"lots" is not a size such as 512m or 2g`}},
		{"duration without unit", "timeout: 30\n", []string{"has no unit"}},
		{"no value", "memory:\n", []string{":1: memory: has no value"}},
		{"duplicate key", "memory: 1g\nmemory: 2g\n", []string{":2: memory: duplicate key (first set on line 1)"}},
		{"syntax error", "memory: [1g\n", []string{"invalid YAML"}},
		{"two documents", "memory: 1g\n---\nmemory: 2g\n", []string{"more than one YAML document"}},
		{"not a mapping", "- a\n- b\n", []string{":1: the file must be a mapping"}},
		{"merge keys", "<<: {memory: 1g}\n", []string{"merge keys (<<) are not supported"}},
		{"bad sandbox name", "sandboxes:\n  Web:\n    memory: 1g\n", []string{`:2: sandboxes.Web "Web": invalid sandbox name`}},
		{"nested sandboxes", "sandboxes:\n  web:\n    sandboxes: {}\n", []string{"cannot be nested"}},
		{"env value must be scalar", "env:\n  A: [1]\n", []string{"the value of A must be a single value"}},
		{"bad bind", "binds: [/a]\n", []string{`"/a" is not HOST:CONTAINER[:ro]`}},
		{"bind propagation refused", "binds: [/a:/b:rshared]\n", []string{`mode "rshared" is not ro or rw`}},
		{"bad ulimit", "ulimits:\n  nofile: many\n", []string{`"many" is not SOFT:HARD`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := parseFile(Source{Layer: LayerProject, File: "/p/.sbx.yaml"}, []byte(tt.file), "web")
			if len(res.problems) == 0 {
				t.Fatalf("no problem for %q", tt.file)
			}
			got := res.problems[0].String() + " | fix: " + res.problems[0].Fix
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("problem %q does not contain %q", got, w)
				}
			}
			if !strings.HasPrefix(got, "project:/p/.sbx.yaml") {
				t.Errorf("problem %q does not start with its layer and file", got)
			}
		})
	}
}

func TestStrictLoadingAccepts(t *testing.T) {
	file := `# everything in its accepted forms
mode: non-main
memory: 512MiB
cpus: 0.5
timeout: 0
init: false
ulimits:
  nofile: 1024
  nproc: 100:200
env:
  DEBUG: true
  COUNT: 3
tmpfs:
  - /a:size=1m
  - path: /b
    options: [size=2m, exec]
  - {path: /c, options: "size=3m,mode=1777"}
binds: []
tools:
  allow: ~
sandboxes:
  web: ~
  api:
    memory: 1g
`
	res := parseFile(Source{Layer: LayerProject, File: "/p"}, []byte(file), "api")
	if len(res.problems) > 0 {
		t.Fatalf("problems: %v", res.problems)
	}
	st := newState()
	st.applyAll(res.entries)
	c := st.c
	if c.Mode != "non-main" || c.Memory != 1<<30 || c.CPUs != 0.5 || c.Timeout != 0 || c.Init {
		t.Errorf("scalars: %+v", c)
	}
	if c.Ulimits["nofile"] != (Ulimit{1024, 1024}) || c.Ulimits["nproc"] != (Ulimit{100, 200}) || len(c.Ulimits) != 2 {
		t.Errorf("ulimits = %v", c.Ulimits)
	}
	if c.Env["DEBUG"] != "true" || c.Env["COUNT"] != "3" || c.Env["LANG"] != "C.UTF-8" {
		t.Errorf("env = %v", c.Env)
	}
	if got := formatValue(lookupKey("tmpfs"), &c.Tmpfs); !strings.Contains(got, "/b:size=2m,exec,nosuid,nodev") || !strings.Contains(got, "/c:size=3m,mode=1777,nosuid,nodev,noexec") {
		t.Errorf("tmpfs = %s", got)
	}
	if len(c.Tools.Allow) != 0 {
		t.Errorf("tools.allow: ~ should clear the list, got %v", c.Tools.Allow)
	}
	if st.src["memory"].Line != 24 {
		t.Errorf("memory from line %d, want the section's line 24", st.src["memory"].Line)
	}
}

func TestEnvAndFlagValueErrors(t *testing.T) {
	f := newFixture(t)
	f.env["SBX_CPUS"] = "many"
	f.flag("env", "NOVALUE")
	_, err := f.resolve()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`env:SBX_CPUS: cpus "many": "many" is not a number`, `flag:--env: env "NOVALUE": "NOVALUE" is not NAME=VALUE`, "use passEnv"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestSizesAndDurations(t *testing.T) {
	sizes := map[string]int64{"0": 0, "512": 512, "1k": 1024, "512m": 512 << 20, "2g": 2 << 30, "2G": 2 << 30, "1.5g": 3 << 29, "64MiB": 64 << 20, "1gb": 1 << 30, "1t": 1 << 40}
	for in, want := range sizes {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1x", "g", "1 g g", "1e9"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
	for in, want := range map[int64]string{0: "0", 1 << 30: "1g", 1536 << 20: "1536m", 1000: "1000", 4096: "4k"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %s, want %s", in, got, want)
		}
	}
	for in, want := range map[string]string{"10m": "10m", "1h": "1h", "90m": "1h30m", "30s": "30s", "0": "0", "1h0m30s": "1h0m30s", "1500ms": "1.5s"} {
		d, err := parseDuration(in)
		if err != nil || FormatDuration(d) != want {
			t.Errorf("duration %q -> %s, %v; want %s", in, FormatDuration(d), err, want)
		}
	}
	if _, err := parseDuration("-1s"); err == nil {
		t.Error("negative duration accepted")
	}
}
