package config

import (
	"strings"
	"testing"
)

func TestPosture(t *testing.T) {
	level := func(r *Resolved, name string) string {
		var out []string
		for _, p := range Posture(r) {
			if p.Name == name {
				out = append(out, p.Level)
			}
		}
		return strings.Join(out, ",")
	}
	f := newFixture(t)
	r := f.mustResolve()
	for _, p := range Posture(r) {
		if p.Level != LevelOK {
			t.Errorf("default posture: %s is %s (%s)", p.Name, p.Level, p.Detail)
		}
	}
	f.projectFile("mode: non-main\nreadOnlyRoot: false\nnetwork: bridge\nuser: root\ninit: false\nworkspace: rw\ncapAdd: [NET_BIND_SERVICE]\nmemorySwap: 2g\n" +
		"dangerouslyAllowReservedTargets: true\n")
	f.trusted = true
	r = f.mustResolve()
	for name, want := range map[string]string{
		"execution": LevelDanger, "read-only root": LevelDanger, "network": LevelWeak, "user": LevelDanger, "init": LevelWeak,
		"workspace": LevelWeak, "capabilities": LevelWeak, "limits": LevelWeak, "break-glass": LevelDanger, "no-new-privileges": LevelOK,
	} {
		if got := level(r, name); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	f.name = "web"
	if got := level(f.mustResolve(), "execution"); got != LevelWeak {
		t.Errorf("a named sandbox in non-main mode is %s", got)
	}
	f.name = ""
	f.projectFile("egress: [pypi.org]\n")
	for _, p := range Posture(f.mustResolve()) {
		if p.Name == "network" && (p.Level != LevelWeak || p.Key != "egress" || !strings.Contains(p.Detail, "[pypi.org]")) {
			t.Errorf("network with egress: %+v", p)
		}
	}
}

func TestExecsOnHost(t *testing.T) {
	for _, tt := range []struct {
		mode      string
		isDefault bool
		want      bool
	}{{ModeAll, true, false}, {ModeAll, false, false}, {ModeNonMain, true, true}, {ModeNonMain, false, false}, {ModeOff, false, true}} {
		r := &Resolved{Config: Config{Mode: tt.mode}, IsDefaultName: tt.isDefault}
		if got := r.ExecsOnHost(); got != tt.want {
			t.Errorf("mode %s default %v: %v", tt.mode, tt.isDefault, got)
		}
	}
}

func TestEntriesMaskSecrets(t *testing.T) {
	f := newFixture(t)
	f.projectFile("env:\n  API_TOKEN: hunter2\n")
	r, _ := f.resolve()
	for _, e := range r.Entries() {
		if strings.Contains(e.Value, "hunter2") {
			t.Errorf("%s shows the secret", e.Key)
		}
	}
	for _, p := range r.Problems {
		if strings.Contains(p.String(), "hunter2") {
			t.Errorf("problem shows the secret: %s", p)
		}
	}
	if value(r, "env.API_TOKEN") != Masked {
		t.Errorf("env.API_TOKEN = %s", value(r, "env.API_TOKEN"))
	}
}
