package egress

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
)

// Preset is a named list of destinations a common tool needs, maintained in presets.txt so
// that a config can say "@python" instead of copying hosts that change over the years.
type Preset struct {
	Name    string // "@python"
	Summary string
	Entries []PresetEntry
}

// PresetEntry is one destination of a preset and why it is there.
type PresetEntry struct {
	Rule string
	Why  string
}

// presets.txt holds the presets as text, with a reason for every entry, so that keeping
// them current is an edit of a list rather than of code.
//
//go:embed presets.txt
var presetsText string

var presets = parsePresets(presetsText)

// parsePresets reads presets.txt; the file is part of sbx, so a malformed one is a bug that
// stops sbx at start (and TestPresetTable).
func parsePresets(text string) []Preset {
	var out []Preset
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		head, rest, ok := strings.Cut(trimmed, ": ")
		indented := trimmed != line
		switch {
		case ok && !indented && strings.HasPrefix(head, "@"):
			out = append(out, Preset{Name: head, Summary: rest})
		case ok && indented && len(out) > 0:
			out[len(out)-1].Entries = append(out[len(out)-1].Entries, PresetEntry{Rule: head, Why: rest})
		default:
			panic(fmt.Sprintf("egress: presets.txt:%d: neither \"@NAME: SUMMARY\" nor an indented \"HOST: WHY\"", i+1))
		}
	}
	return out
}

// Presets returns every preset, sorted by name.
func Presets() []Preset {
	out := slices.Clone(presets)
	for i := range out {
		out[i].Entries = slices.Clone(out[i].Entries)
	}
	slices.SortFunc(out, func(a, b Preset) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// presetNames is the list an unknown preset's error offers.
func presetNames() string {
	var names []string
	for _, p := range Presets() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// Expand parses a list as a config or a command writes it: presets become their entries,
// each marked with the preset it came from; a rule listed twice is kept where it first
// appears, so the order of the result is the order of decision. Every bad entry is
// reported, as RuleErrors.
func Expand(texts []string) ([]Rule, error) {
	var (
		out  []Rule
		bad  RuleErrors
		seen = map[string]bool{}
	)
	add := func(r Rule) {
		if !seen[r.Text] {
			seen[r.Text] = true
			out = append(out, r)
		}
	}
	for _, text := range texts {
		name := strings.ToLower(strings.TrimSpace(text))
		if !strings.HasPrefix(name, "@") {
			r, err := ParseRule(text)
			if err != nil {
				bad = append(bad, err.(*RuleError))
				continue
			}
			add(r)
			continue
		}
		i := slices.IndexFunc(presets, func(p Preset) bool { return p.Name == name })
		if i < 0 {
			bad = append(bad, &RuleError{Rule: text, Reason: "unknown preset", Fix: "the presets are " + presetNames()})
			continue
		}
		for _, e := range presets[i].Entries {
			r, err := ParseRule(e.Rule)
			if err != nil {
				panic("egress: preset " + name + ": " + err.Error()) // the table is ours; a test parses every entry
			}
			r.Preset = name
			add(r)
		}
	}
	if len(bad) > 0 {
		return nil, bad
	}
	return out, nil
}
