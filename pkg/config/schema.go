package config

import (
	"encoding/json"
	"strings"

	"go.yaml.in/yaml/v3"
)

// JSONSchema returns a JSON Schema (draft 2020-12) of config files, for editors. It is
// generated from the same key list the loader uses, so the two cannot drift apart.
func JSONSchema() []byte {
	settings := map[string]any{}
	groups := map[string]map[string]any{}
	for _, k := range registry {
		s := keySchema(k)
		if g := groupOf(k.name); g != "" {
			if groups[g] == nil {
				groups[g] = map[string]any{}
				settings[g] = map[string]any{"type": "object", "additionalProperties": false, "properties": groups[g]}
			}
			groups[g][strings.TrimPrefix(k.name, g+".")] = s
			continue
		}
		settings[k.name] = s
	}
	top := map[string]any{}
	for k, v := range settings {
		top[k] = v
	}
	top[sectionKey] = map[string]any{
		"description":          "per-sandbox overrides: keys under sandboxes.NAME apply only to the sandbox of that name",
		"type":                 "object",
		"propertyNames":        map[string]any{"pattern": namePattern},
		"additionalProperties": map[string]any{"$ref": "#/$defs/settings"},
	}
	schema := map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"$id":                  "https://github.com/sbx-sandbox/sbx/config.schema.json",
		"title":                "sbx configuration (.sbx.yaml, ~/.config/sbx/config.yaml)",
		"type":                 "object",
		"additionalProperties": false,
		"properties":           top,
		"$defs": map[string]any{
			"settings": map[string]any{"type": "object", "additionalProperties": false, "properties": settings},
		},
	}
	out, err := json.MarshalIndent(schema, "", "  ")
	if err != nil {
		panic(err) // only maps of plain values: cannot fail
	}
	return append(out, '\n')
}

func keySchema(k *keyDef) map[string]any {
	s := map[string]any{"description": k.doc + " (default: " + defaultText(k) + ")"}
	sizePattern := `^[0-9]+(\.[0-9]+)?\s*([kKmMgGtT])?([iI]?[bB])?$`
	switch k.kind {
	case kString:
		s["type"] = "string"
		if len(k.enum) > 0 {
			s["enum"] = k.enum
		}
	case kBool:
		s["type"] = "boolean"
	case kInt:
		s["type"] = "integer"
	case kFloat:
		s["type"] = "number"
	case kSize:
		s["type"] = []string{"string", "integer"}
		s["pattern"] = sizePattern
	case kDuration:
		s["type"] = []string{"string", "integer"}
		s["pattern"] = `^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
	case kStrings:
		s["type"] = "array"
		s["items"] = map[string]any{"type": "string"}
	case kEnv:
		s["type"] = "object"
		s["additionalProperties"] = map[string]any{"type": []string{"string", "number", "boolean"}}
	case kUlimits:
		s["type"] = "object"
		s["additionalProperties"] = map[string]any{"type": []string{"string", "integer"}, "pattern": `^[0-9]+(:[0-9]+)?$`}
	case kTmpfs:
		s["type"] = "array"
		s["items"] = map[string]any{"oneOf": []any{
			map[string]any{"type": "string", "pattern": "^/"},
			map[string]any{"type": "object", "additionalProperties": false, "required": []string{"path"}, "properties": map[string]any{
				"path":    map[string]any{"type": "string", "pattern": "^/"},
				"options": map[string]any{"type": []string{"array", "string"}, "items": map[string]any{"type": "string"}},
			}},
		}}
	case kBinds:
		s["type"] = "array"
		s["items"] = map[string]any{"type": "string", "pattern": `^[^:]+:[^:]+(:(ro|rw))?$`}
	}
	return s
}

// InitTemplate is the commented .sbx.yaml that "sbx config init" writes: every key,
// commented out, with its default and a one-line description. Uncommenting a key line
// ("# key: value") sets that key to its default.
func InitTemplate() string {
	defaults := builtinDefaults()
	if pe, ok := profileEntries(defaults.Profile); ok {
		st := &state{c: defaults, src: map[string]Source{}}
		st.applyAll(pe)
		defaults = st.c
	}
	var b strings.Builder
	b.WriteString(`## sbx configuration of this project.
##
## Every key is listed, commented out, with its default; uncomment a "# key: value" line to
## change it. Layers, lowest first: built-in defaults, the profile, ~/.config/sbx/config.yaml,
## this file, --config FILE, SBX_* environment variables, command-line flags. binds and tmpfs
## add up across layers, env merges by name, and anything else is replaced by a higher layer.
## Unknown keys are errors. "sbx explain" shows every value and where it came from;
## "sbx config schema" prints a JSON Schema for editors.
`)
	for i := 0; i < len(registry); i++ {
		k := registry[i]
		g := groupOf(k.name)
		if g == "" {
			b.WriteString("\n## " + templateDoc(k) + "\n")
			b.WriteString(templateValue(k, "", k.name, k.field(&defaults)))
			continue
		}
		// A group (prune, tools): the descriptions first, then the nested block.
		j := i
		for j < len(registry) && groupOf(registry[j].name) == g {
			j++
		}
		b.WriteString("\n")
		for _, gk := range registry[i:j] {
			b.WriteString("## " + gk.name + ": " + templateDoc(gk) + "\n")
		}
		b.WriteString("# " + g + ":\n")
		for _, gk := range registry[i:j] {
			b.WriteString(templateValue(gk, "  ", strings.TrimPrefix(gk.name, g+"."), gk.field(&defaults)))
		}
		i = j - 1
	}
	b.WriteString(`
## Per-sandbox overrides: keys under sandboxes.NAME apply only to "sbx ... -n NAME".
## sandboxes:
##   web:
##     network: bridge
##     memory: 2g
`)
	return b.String()
}

func templateDoc(k *keyDef) string {
	if k.defDoc != "" {
		return k.doc + " (default: " + k.defDoc + ")"
	}
	return k.doc
}

// templateValue writes "# name: value" lines for the default value behind ptr.
func templateValue(k *keyDef, indent, name string, ptr any) string {
	line := func(s string) string { return "# " + indent + s + "\n" }
	switch v := ptr.(type) {
	case *[]string:
		if len(*v) == 0 {
			return line(name + ": []")
		}
		return line(name + ": [" + strings.Join(*v, ", ") + "]")
	case *[]Tmpfs:
		out := line(name + ":")
		for _, t := range *v {
			out += line("  - " + t.String())
		}
		return out
	case *[]Bind:
		return line(name + ": []")
	case *map[string]string, *map[string]Ulimit:
		out := line(name + ":")
		for _, kv := range strings.Split(formatValue(k, ptr), ", ") {
			n, val, _ := strings.Cut(kv, "=")
			out += line("  " + n + ": " + yamlScalar(val))
		}
		return out
	}
	if k.kind != kString {
		return line(name + ": " + formatValue(k, ptr))
	}
	return line(name + ": " + yamlScalar(formatValue(k, ptr)))
}

// yamlScalar quotes s when YAML would read it as something else.
func yamlScalar(s string) string {
	out, err := yaml.Marshal(s)
	if err != nil {
		return `"` + s + `"`
	}
	return strings.TrimSuffix(string(out), "\n")
}
