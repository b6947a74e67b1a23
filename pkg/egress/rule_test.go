package egress

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	addr := func(prefix string, port int, text string) Rule {
		return Rule{Text: text, Prefix: netip.MustParsePrefix(prefix), Port: port}
	}
	for in, want := range map[string]Rule{
		"pypi.org":              {Text: "pypi.org", Name: "pypi.org"},
		"  PyPI.Org.  ":         {Text: "pypi.org", Name: "pypi.org"},
		"*.pythonhosted.org":    {Text: "*.pythonhosted.org", Name: "pythonhosted.org", Wildcard: true},
		"github.com:22":         {Text: "github.com:22", Name: "github.com", Port: 22},
		"*.Example.COM:8443":    {Text: "*.example.com:8443", Name: "example.com", Wildcard: true, Port: 8443},
		"xn--bcher-kva.example": {Text: "xn--bcher-kva.example", Name: "xn--bcher-kva.example"},
		"_acme.example.com":     {Text: "_acme.example.com", Name: "_acme.example.com"},
		"localhost":             {Text: "localhost", Name: "localhost"},
		"10.1.2.3:5432":         addr("10.1.2.3/32", 5432, "10.1.2.3:5432"),
		"10.1.2.3":              addr("10.1.2.3/32", 0, "10.1.2.3"),
		"10.0.0.0/8":            addr("10.0.0.0/8", 0, "10.0.0.0/8"),
		"10.0.0.0/8:5432":       addr("10.0.0.0/8", 5432, "10.0.0.0/8:5432"),
		"::1":                   addr("::1/128", 0, "::1"),
		"[::1]":                 addr("::1/128", 0, "::1"),
		"[::1]:80":              addr("::1/128", 80, "[::1]:80"),
		"[2001:DB8::1]:443":     addr("2001:db8::1/128", 443, "[2001:db8::1]:443"),
		"fd00::/8":              addr("fd00::/8", 0, "fd00::/8"),
		"[fd00::/8]:5432":       addr("fd00::/8", 5432, "[fd00::/8]:5432"),
		"0.0.0.0/0":             addr("0.0.0.0/0", 0, "0.0.0.0/0"),
	} {
		got, err := ParseRule(in)
		if err != nil || got != want {
			t.Errorf("ParseRule(%q) = %+v, %v, want %+v", in, got, err, want)
			continue
		}
		// The canonical text parses to the same rule.
		if again, err := ParseRule(got.Text); err != nil || again != got {
			t.Errorf("canonical text %q parses to %+v, %v", got.Text, again, err)
		}
	}
}

func TestParseRuleRefused(t *testing.T) {
	tests := []struct{ in, reason, fix string }{
		{"", "empty", "a rule is a name"},
		{"*", "allows every destination", "network: bridge"},
		{"@python", "a preset is not a single rule", "egress.Expand"},
		{"bücher.example", "a non-ASCII name", "punycode"},
		{"*.com", "a wildcard over a whole top-level domain", "two labels"},
		{"a.*.example.com", "a name with the character '*'", ""},
		{"pypi.org:0", `port "0" is not a number from 1 to 65535`, ""},
		{"pypi.org:65536", `port "65536"`, ""},
		{"pypi.org:+80", `port "+80"`, ""},
		{"pypi.org:", `port ""`, ""},
		{"10.1.2.3/8", "host bits set in a network; did you mean 10.0.0.0/8?", ""},
		{"10.0.0.0/33", "not a valid network", ""},
		{"1.2.3", "neither a name nor an address", ""},
		{"0x7f.1", "neither a name nor an address", ""},
		{"2130706433", "neither a name nor an address", ""},
		{"::ffff:10.1.2.3", "an IPv4-mapped IPv6 address; write the IPv4 address 10.1.2.3", ""},
		{"fe80::1%eth0", "an address with a zone", ""},
		{"[pypi.org]:443", "brackets hold an IPv6 address or network", ""},
		{"1:2:3", "not a valid IPv6 address", ""},
		{"a..b", "an empty label", ""},
		{strings.Repeat("a", 64) + ".example", "longer than 63", ""},
		{strings.Repeat("abcdefghi.", 26) + "com", "a name longer than 253 characters", ""},
		{"http://pypi.org", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseRule(tt.in)
			var re *RuleError
			if !errors.As(err, &re) {
				t.Fatalf("got %v, want a *RuleError", err)
			}
			if re.Rule != tt.in || !strings.Contains(re.Reason, tt.reason) || !strings.Contains(re.Fix, tt.fix) || re.Fix == "" {
				t.Errorf("got %+v", re)
			}
			if !strings.HasPrefix(err.Error(), "egress rule ") || err.Error() != strings.ToLower(err.Error()[:1])+err.Error()[1:] {
				t.Errorf("error %q", err)
			}
		})
	}
}

func TestExpandPresets(t *testing.T) {
	rules, err := Expand([]string{"@python", "pypi.org", "github.com:22", "@GitHub"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rules {
		got = append(got, r.Text+" "+r.Preset)
	}
	want := []string{
		"pypi.org @python", // first listed, so the preset's; the plain entry is a duplicate
		"files.pythonhosted.org @python",
		"github.com:22 ",
		"github.com @github",
		"codeload.github.com @github",
		"raw.githubusercontent.com @github",
		"objects.githubusercontent.com @github",
		"release-assets.githubusercontent.com @github",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q,\nwant %q", got, want)
	}
}

// Every preset entry is a plain name on the default ports with a reason, and the presets
// the issue names exist.
func TestPresetTable(t *testing.T) {
	names := map[string]bool{}
	for _, p := range Presets() {
		names[p.Name] = true
		if p.Summary == "" || len(p.Entries) == 0 {
			t.Errorf("%s: no summary or no entries", p.Name)
		}
		for _, e := range p.Entries {
			r, err := ParseRule(e.Rule)
			if err != nil || r.IsAddr() || r.Wildcard || r.Port != 0 || r.Text != e.Rule || e.Why == "" {
				t.Errorf("%s: entry %+v parses to %+v, %v", p.Name, e, r, err)
			}
		}
		rules, err := Expand([]string{p.Name})
		if err != nil || len(rules) != len(p.Entries) {
			t.Errorf("%s expands to %d rules, %v", p.Name, len(rules), err)
		}
	}
	for _, want := range []string{"@debian", "@python", "@node", "@go", "@github", "@rust"} {
		if !names[want] {
			t.Errorf("no preset %s", want)
		}
	}
}

func TestExpandReportsEveryBadEntry(t *testing.T) {
	_, err := Expand([]string{"pypi.org", "@pyhton", "a b", "github.com:99999"})
	var list RuleErrors
	if !errors.As(err, &list) || len(list) != 3 {
		t.Fatalf("got %v", err)
	}
	if list[0].Error() != `egress rule "@pyhton": unknown preset` ||
		list[0].Hint() != "the presets are @debian, @github, @go, @node, @python, @rust" {
		t.Errorf("unknown preset: %q, hint %q", list[0].Error(), list[0].Hint())
	}
	if !strings.HasPrefix(err.Error(), "3 egress rules refused:\n  egress rule \"@pyhton\": unknown preset\n") {
		t.Errorf("error:\n%s", err)
	}
	if list.Hint() != ruleForms {
		t.Errorf("hint %q", list.Hint())
	}
	_, err = Expand([]string{"@nope"})
	if err.Error() != `egress rule "@nope": unknown preset` || !strings.Contains(err.(RuleErrors).Hint(), "@python") {
		t.Errorf("single: %v", err)
	}
}
