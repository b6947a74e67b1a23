package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestInitTemplateIsInertAndValid(t *testing.T) {
	f := newFixture(t)
	f.projectFile(InitTemplate())
	r := f.mustResolve()
	for key, src := range r.Sources {
		if !src.IsDefault() && src.Layer != LayerProfile {
			t.Errorf("%s comes from %s; the template must change nothing", key, src)
		}
	}
}

// Uncommenting every key line must give the defaults back: the template tells the truth.
func TestInitTemplateShowsTheDefaults(t *testing.T) {
	var lines []string
	for _, l := range strings.Split(InitTemplate(), "\n") {
		lines = append(lines, strings.TrimPrefix(l, "# "))
	}
	f := newFixture(t)
	want := f.mustResolve().Config
	f.projectFile(strings.Join(lines, "\n"))
	r := f.mustResolve()
	if !reflect.DeepEqual(r.Config, want) {
		t.Errorf("uncommented template resolves to\n%+v\nwant\n%+v", r.Config, want)
	}
	if r.Sources["memory"].Layer != LayerProject || r.Sources["prune.maxAgeDays"].Layer != LayerProject {
		t.Errorf("keys were not uncommented: %v", r.Sources["memory"])
	}
	for _, k := range registry {
		if !strings.Contains(InitTemplate(), k.doc) {
			t.Errorf("template lacks the description of %s", k.name)
		}
	}
}

func TestJSONSchema(t *testing.T) {
	var s struct {
		Schema     string                     `json:"$schema"`
		Properties map[string]json.RawMessage `json:"properties"`
		Defs       struct {
			Settings struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"settings"`
		} `json:"$defs"`
		AdditionalProperties bool `json:"additionalProperties"`
	}
	if err := json.Unmarshal(JSONSchema(), &s); err != nil {
		t.Fatal(err)
	}
	if s.AdditionalProperties || !strings.Contains(s.Schema, "2020-12") {
		t.Errorf("schema header: %+v", s)
	}
	for _, name := range append(childNames(""), sectionKey) {
		if _, ok := s.Properties[name]; !ok {
			t.Errorf("schema lacks %s", name)
		}
	}
	if _, ok := s.Defs.Settings.Properties[sectionKey]; ok {
		t.Error("sections may not nest")
	}
	if !strings.Contains(string(s.Properties["prune"]), "idleHours") || !strings.Contains(string(s.Properties["mode"]), `"non-main"`) {
		t.Errorf("prune = %s, mode = %s", s.Properties["prune"], s.Properties["mode"])
	}
}

func TestKeysDocumented(t *testing.T) {
	for _, k := range Keys() {
		if k.Description == "" || k.Default == "" {
			t.Errorf("%s: description %q, default %q", k.Key, k.Description, k.Default)
		}
		if k.Env == "" {
			continue
		}
		var want strings.Builder
		want.WriteString("SBX_")
		for _, r := range strings.ReplaceAll(k.Key, ".", "_") {
			if r >= 'A' && r <= 'Z' {
				want.WriteByte('_')
			}
			want.WriteRune(r)
		}
		if got := strings.ToUpper(want.String()); k.Env != got {
			t.Errorf("%s: env %s, want %s", k.Key, k.Env, got)
		}
	}
}
