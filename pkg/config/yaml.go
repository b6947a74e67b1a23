package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sbx-sandbox/sbx/internal/lazyre"
)

// entry is one key set by one layer. Scalars carry val; list and map kinds carry items, each
// with the line it was written on.
type entry struct {
	key   *keyDef
	src   Source
	val   any
	items []item
}

type item struct {
	val any
	src Source
}

// fileResult is what one config file contributes: its top-level entries followed by the
// entries of its section for the chosen sandbox, so the section wins.
type fileResult struct {
	entries  []entry
	problems []Problem
	// sections is true when the file has a sandboxes: key, so what it says depends on the
	// sandbox's name.
	sections bool
	// sectionNames are the names of its sandboxes: sections.
	sectionNames []string
}

var yamlLineRE = lazyre.New(`^yaml: line (\d+): (.*)$`)

// parseFile strictly decodes a config file: unknown keys, wrong types, duplicate keys and
// anything YAML-clever (merge keys, several documents) are problems with the file's line.
// sandbox selects which sandboxes.NAME section applies; every section is checked.
func parseFile(src Source, data []byte, sandbox string) fileResult {
	var res fileResult
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return res
		}
		res.problems = append(res.problems, yamlProblem(src, err))
		return res
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			res.problems = append(res.problems, yamlProblem(src, err))
			return res
		}
		res.problems = append(res.problems, Problem{Source: src.at(line), Reason: "the file holds more than one YAML document",
			Fix: "keep one document: remove the second '---' and what follows, or merge it into the first"})
		return res
	}
	root := deref(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = deref(root.Content[0])
	}
	if isNull(root) || root.Kind == yaml.DocumentNode {
		return res
	}
	p := &fileParser{src: src, sandbox: sandbox}
	if root.Kind != yaml.MappingNode {
		p.problem(root, "", "", "the file must be a mapping of keys such as 'memory: 2g'", "see sbx config init for a commented example")
		return p.result()
	}
	p.mapping(root, "", false, true)
	return p.result()
}

type fileParser struct {
	src      Source
	sandbox  string
	top      []entry
	section  []entry
	problems []Problem
	// hasSections is set by a sandboxes: key.
	hasSections  bool
	sectionNames []string
}

func (p *fileParser) result() fileResult {
	return fileResult{entries: append(p.top, p.section...), problems: p.problems, sections: p.hasSections, sectionNames: p.sectionNames}
}

func (p *fileParser) problem(n *yaml.Node, key, value, reason, fix string) {
	p.problems = append(p.problems, Problem{Key: key, Source: p.src.at(n.Line), Value: value, Reason: reason, Fix: fix})
}

// mapping walks the keys of m. prefix is "" at the top and "prune" inside prune:; inSection
// is true inside sandboxes.NAME, and keep is false for the sections of other sandboxes, which
// are checked but not applied.
func (p *fileParser) mapping(m *yaml.Node, prefix string, inSection, keep bool) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := deref(m.Content[i]), deref(m.Content[i+1])
		name := kn.Value
		path := joinKey(prefix, name)
		if name == "<<" {
			p.problem(kn, path, "", "YAML merge keys (<<) are not supported", "write the keys out")
			continue
		}
		if line, dup := seen[name]; dup {
			p.problem(kn, path, "", fmt.Sprintf("duplicate key (first set on line %d)", line), "keep one of them")
			continue
		}
		seen[name] = kn.Line
		switch {
		case prefix == "" && name == sectionKey:
			p.hasSections = true
			if inSection {
				p.problem(kn, name, "", "sandboxes cannot be nested inside a sandbox's section", "move it to the top level of the file")
				continue
			}
			p.sections(vn)
		case prefix == "" && isGroup(name):
			if vn.Kind != yaml.MappingNode {
				p.problem(vn, name, nodeText(vn), "expected a mapping of "+strings.Join(childNames(name), ", "), fmt.Sprintf("write it as %s: {%s: ...}", name, childNames(name)[0]))
				continue
			}
			p.mapping(vn, name, inSection, keep)
		default:
			k := lookupKey(path)
			if k == nil {
				reason, fix := unknownKey(prefix, name)
				p.problem(kn, path, "", reason, fix)
				continue
			}
			e, prob := parseNode(k, p.src.at(kn.Line), vn)
			if prob != nil {
				p.problems = append(p.problems, *prob)
				continue
			}
			switch {
			case !keep:
			case inSection:
				p.section = append(p.section, e)
			default:
				p.top = append(p.top, e)
			}
		}
	}
}

func (p *fileParser) sections(n *yaml.Node) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.problem(n, sectionKey, nodeText(n), "expected a mapping of sandbox names to settings", "write it as sandboxes: {NAME: {memory: 2g}}")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := deref(n.Content[i]), deref(n.Content[i+1])
		key := sectionKey + "." + kn.Value
		if err := ValidName(kn.Value); err != nil {
			p.problem(kn, key, kn.Value, err.Error(), "use lower-case letters, digits, '_', '.' and '-', starting with a letter or digit")
			continue
		}
		if seen[kn.Value] {
			p.problem(kn, key, "", "duplicate sandbox section", "merge the two sections")
			continue
		}
		seen[kn.Value] = true
		p.sectionNames = append(p.sectionNames, kn.Value)
		if isNull(vn) {
			continue
		}
		if vn.Kind != yaml.MappingNode {
			p.problem(vn, key, nodeText(vn), "expected a mapping of settings", "write it as "+kn.Value+": {memory: 2g}")
			continue
		}
		p.mapping(vn, "", true, kn.Value == p.sandbox)
	}
}

// parseNode decodes the value of key k. Types are strict: a size must be a size, a list a list.
func parseNode(k *keyDef, src Source, n *yaml.Node) (entry, *Problem) {
	e := entry{key: k, src: src}
	bad := func(at *yaml.Node, value, reason string) (entry, *Problem) {
		if k.kind == kEnv {
			value = "" // it may hold a secret
		}
		return e, &Problem{Key: k.name, Source: src.at(at.Line), Value: value, Reason: reason, Fix: fixFor(k)}
	}
	if isNull(n) {
		if isList(k.kind) {
			return e, nil // an empty list or map: a replace-kind key is cleared
		}
		return bad(n, "", "has no value")
	}
	if !isList(k.kind) {
		if n.Kind != yaml.ScalarNode {
			return bad(n, nodeText(n), "expected a single "+k.kind.String()+" value, got a "+kindName(n))
		}
		v, err := parseScalarNode(k, n)
		if err != nil {
			return bad(n, n.Value, err.Error())
		}
		e.val = v
		return e, nil
	}
	switch k.kind {
	case kEnv, kUlimits:
		if n.Kind != yaml.MappingNode {
			return bad(n, nodeText(n), "expected a mapping of NAME: value, got a "+kindName(n))
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := deref(n.Content[i]), deref(n.Content[i+1])
			if seen[kn.Value] {
				return bad(kn, kn.Value, "duplicate name")
			}
			seen[kn.Value] = true
			if vn.Kind != yaml.ScalarNode || isNull(vn) {
				return bad(vn, kn.Value, "the value of "+kn.Value+" must be a single value")
			}
			var v any = envItem{Name: kn.Value, Value: vn.Value}
			if k.kind == kUlimits {
				u, err := parseUlimit(vn.Value)
				if err != nil {
					return bad(vn, kn.Value+"="+vn.Value, err.Error())
				}
				v = ulimitItem{Name: kn.Value, Ulimit: u}
			}
			e.items = append(e.items, item{val: v, src: src.at(kn.Line)})
		}
		return e, nil
	}
	if n.Kind != yaml.SequenceNode {
		return bad(n, nodeText(n), "expected a list, got a "+kindName(n))
	}
	for _, c := range n.Content {
		c = deref(c)
		var (
			v   any
			err error
		)
		switch {
		case k.kind == kTmpfs && c.Kind == yaml.MappingNode:
			v, err = parseTmpfsMapping(c)
		case c.Kind != yaml.ScalarNode || isNull(c):
			err = fmt.Errorf("each entry must be a single value, got a %s", kindName(c))
		default:
			v, err = parseItemText(k, c.Value)
		}
		if err != nil {
			return bad(c, nodeText(c), err.Error())
		}
		e.items = append(e.items, item{val: v, src: src.at(c.Line)})
	}
	return e, nil
}

func parseScalarNode(k *keyDef, n *yaml.Node) (any, error) {
	tag := n.ShortTag()
	switch k.kind {
	case kString:
		return n.Value, nil
	case kBool:
		if tag != "!!bool" {
			return nil, fmt.Errorf("%q is not true or false", n.Value)
		}
	case kInt:
		if tag != "!!int" {
			return nil, fmt.Errorf("%q is not a whole number", n.Value)
		}
	case kFloat:
		if tag != "!!int" && tag != "!!float" {
			return nil, fmt.Errorf("%q is not a number", n.Value)
		}
	case kDuration:
		if tag == "!!int" && n.Value != "0" {
			return nil, fmt.Errorf("%q has no unit: write 30s, 10m or 1h (0 means none)", n.Value)
		}
	}
	return parseScalarText(k, n.Value)
}

// parseTmpfsMapping reads the long form {path: /x, options: [size=1g, exec]}.
func parseTmpfsMapping(n *yaml.Node) (Tmpfs, error) {
	var path string
	var opts []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := deref(n.Content[i]), deref(n.Content[i+1])
		switch kn.Value {
		case "path":
			if vn.Kind != yaml.ScalarNode {
				return Tmpfs{}, fmt.Errorf("path must be a single value")
			}
			path = vn.Value
		case "options":
			switch vn.Kind {
			case yaml.ScalarNode:
				opts = splitOptions(vn.Value)
			case yaml.SequenceNode:
				for _, o := range vn.Content {
					opts = append(opts, deref(o).Value)
				}
			default:
				return Tmpfs{}, fmt.Errorf("options must be a list or a comma-separated string")
			}
		default:
			return Tmpfs{}, fmt.Errorf("unknown tmpfs field %q (expected path and options)", kn.Value)
		}
	}
	if path == "" {
		return Tmpfs{}, fmt.Errorf("a tmpfs entry needs a path")
	}
	return newTmpfs(path, opts), nil
}

func isList(k kind) bool { return k >= kStrings }

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	if isNull(n) {
		return "null"
	}
	return map[string]string{"!!str": "string", "!!int": "number", "!!float": "number", "!!bool": "boolean"}[n.ShortTag()] + " value"
}

// nodeText is a short rendering of a node for messages.
func nodeText(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	out, err := yaml.Marshal(n)
	if err != nil {
		return kindName(n)
	}
	s := strings.Join(strings.Fields(string(out)), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func yamlProblem(src Source, err error) Problem {
	msg := err.Error()
	line := 0
	if m := yamlLineRE().FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	return Problem{Source: src.at(line), Reason: "invalid YAML: " + msg, Fix: "fix the syntax; sbx config init shows a valid example"}
}

func joinKey(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// fixFor is the generic fix for a value of the wrong shape.
func fixFor(k *keyDef) string {
	examples := map[kind]string{
		kString: k.name + ": VALUE", kBool: k.name + ": true", kInt: k.name + ": 256", kFloat: k.name + ": 1.5",
		kSize: k.name + ": 2g", kDuration: k.name + ": 10m", kStrings: k.name + ": [A, B]", kEnv: k.name + ": {NAME: value}",
		kUlimits: k.name + ": {nofile: 4096:4096}", kTmpfs: k.name + ": [/cache:size=512m]", kBinds: k.name + ": [/abs/host/path:/data:ro]",
	}
	ex := examples[k.kind]
	if len(k.enum) > 0 {
		ex = k.name + ": " + strings.Join(k.enum, " | ")
	}
	if g := groupOf(k.name); g != "" {
		ex = strings.Replace(ex, k.name+":", g+": {"+strings.TrimPrefix(k.name, g+".")+":", 1) + "}"
	}
	return "write it as " + ex
}

// absentKeys are settings sbx deliberately has no key for, with the reason.
var absentKeys = map[string]string{
	"privileged":      "sbx never runs privileged containers",
	"devices":         "sbx never passes host devices in",
	"sysctls":         "sbx never changes kernel parameters",
	"securityOpt":     "security options follow from seccompProfile and apparmorProfile, and no-new-privileges is always on",
	"pid":             "sandboxes never share the host's process namespace",
	"ipc":             "sandboxes never share the host's IPC namespace",
	"uts":             "sandboxes never share the host's UTS namespace",
	"userns":          "sandboxes never change the user namespace mode",
	"cgroupns":        "sandboxes never share the host's cgroup namespace",
	"noNewPrivileges": "no-new-privileges is always on and cannot be turned off",
}

// unknownKey explains an unknown key and suggests the closest known one.
func unknownKey(prefix, name string) (reason, fix string) {
	reason = "unknown key"
	if prefix != "" {
		reason = "unknown key in " + prefix
	}
	if why, ok := absentKeys[name]; ok && prefix == "" {
		return reason + ": " + why, "remove it"
	}
	if s := suggest(prefix, name); s != "" {
		return fmt.Sprintf("%s; did you mean %q?", reason, s), fmt.Sprintf("rename it to %q", s)
	}
	return reason, "remove it; sbx config schema lists every key"
}

func suggest(prefix, name string) string {
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	candidates := childNames(prefix)
	if prefix == "" {
		candidates = append(candidates, sectionKey)
	}
	best, bestDist := "", 0
	for _, c := range candidates {
		if norm(c) == norm(name) {
			return joinKey(prefix, c)
		}
		d := levenshtein(norm(name), norm(c))
		if best == "" || d < bestDist {
			best, bestDist = c, d
		}
	}
	if best != "" && bestDist <= max(2, len(name)/3) {
		return joinKey(prefix, best)
	}
	// A nested key written at the wrong level: idleHours -> prune.idleHours.
	for _, k := range registry {
		if g := groupOf(k.name); g != "" && g != prefix && norm(strings.TrimPrefix(k.name, g+".")) == norm(name) {
			return k.name
		}
	}
	return ""
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
