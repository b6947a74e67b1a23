package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one destination of an allow or deny list.
type Rule struct {
	// Text is the rule in its canonical form ("pypi.org", "*.pythonhosted.org",
	// "github.com:22", "10.0.0.0/8", "[::1]:80"): what a Decision names and the log records.
	Text string
	// Preset is the preset the rule came from ("@python"), or "" for a rule written as is.
	Preset string
	// Name is the host name of a name rule: lower-case, no trailing dot, without the "*."
	// of a wildcard. Empty for an address rule.
	Name string
	// Wildcard makes Name match every subdomain of it, at any depth, but not Name itself.
	Wildcard bool
	// Prefix is the network of an address rule (a single address is a /32 or /128);
	// invalid for a name rule.
	Prefix netip.Prefix
	// Port is the port the rule names, or 0 when it names none. Without a port an allowed
	// name is reachable on 80 and 443, an allowed address or network on every port, and a
	// deny entry closes every port.
	Port int
}

// IsAddr reports whether r is an address or network rule rather than a name rule.
func (r Rule) IsAddr() bool { return r.Prefix.IsValid() }

// matchName reports whether the normalized host name matches a name rule.
func (r Rule) matchName(name string) bool {
	if r.IsAddr() {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(name, "."+r.Name)
	}
	return name == r.Name
}

// matchAddr reports whether an (unmapped) address matches an address rule.
func (r Rule) matchAddr(addr netip.Addr) bool {
	return r.IsAddr() && r.Prefix.Contains(addr)
}

// matchPort applies the port defaults documented on Port.
func (r Rule) matchPort(port int, deny bool) bool {
	switch {
	case r.Port != 0:
		return port == r.Port
	case deny || r.IsAddr():
		return true
	default:
		return port == 80 || port == 443
	}
}

// RuleError is a destination that cannot be a rule.
type RuleError struct {
	Rule   string // as written
	Reason string
	Fix    string
}

func (e *RuleError) Error() string { return fmt.Sprintf("egress rule %q: %s", e.Rule, e.Reason) }

// Hint says how to write the rule.
func (e *RuleError) Hint() string { return e.Fix }

// RuleErrors is every refused entry of a list, in order.
type RuleErrors []*RuleError

func (e RuleErrors) Error() string {
	if len(e) == 1 {
		return e[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d egress rules refused:", len(e))
	for _, r := range e {
		b.WriteString("\n  " + r.Error())
	}
	return b.String()
}

// Hint is the single entry's fix, or the forms a rule may take.
func (e RuleErrors) Hint() string {
	if len(e) == 1 {
		return e[0].Fix
	}
	return ruleForms
}

const ruleForms = "a rule is a name (pypi.org), a wildcard (*.pythonhosted.org), either with :PORT, an address (10.1.2.3, [::1]:80), a network (10.0.0.0/8, 10.0.0.0/8:5432) or a preset (@python)"

// maxNameLen is the longest DNS name in its text form, without the trailing dot.
const maxNameLen = 253

// ParseRule parses one destination that is not a preset: a name, "*." and a name, an
// address or a CIDR network, each with an optional ":PORT" (IPv6 with a port in brackets:
// "[::1]:80", "[fd00::/8]:5432").
func ParseRule(text string) (Rule, error) {
	s := strings.TrimSpace(text)
	fail := func(reason, fix string) (Rule, error) {
		if fix == "" {
			fix = ruleForms
		}
		return Rule{}, &RuleError{Rule: text, Reason: reason, Fix: fix}
	}
	switch {
	case s == "":
		return fail("empty", "")
	case strings.HasPrefix(s, "@"):
		return fail("a preset is not a single rule", "expand the list with egress.Expand")
	case s == "*" || s == "*.*":
		return fail("allows every destination", `use network: bridge for unfiltered access, or list the names the sandbox needs`)
	}
	host, portText, hasPort, bracketed := splitRule(s)
	port := 0
	if hasPort {
		p, ok := parsePort(portText)
		if !ok {
			return fail(fmt.Sprintf("port %q is not a number from 1 to 65535", portText), "")
		}
		port = p
	}
	if prefix, ok, reason := parseNetwork(host); ok || reason != "" {
		if reason != "" {
			return fail(reason, "")
		}
		r := Rule{Prefix: prefix, Port: port}
		r.Text = addrRuleText(prefix, port)
		return r, nil
	}
	if bracketed {
		return fail("brackets hold an IPv6 address or network", "")
	}
	r := Rule{Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard = true
		host = rest
	}
	name, err := normalizeName(host)
	if err != nil {
		return fail(err.Error(), nameFix(host))
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		return fail("a wildcard over a whole top-level domain", "name at least two labels after *. (*.example.com)")
	}
	r.Name = name
	r.Text = name
	if r.Wildcard {
		r.Text = "*." + name
	}
	if port != 0 {
		r.Text += ":" + strconv.Itoa(port)
	}
	return r, nil
}

// splitRule separates a rule's host part from its port. A bare IPv6 address or network has
// several colons and no port; with a port it is bracketed.
func splitRule(s string) (host, port string, hasPort, bracketed bool) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		inner, after, found := strings.Cut(rest, "]")
		if !found {
			return s, "", false, false
		}
		if p, ok := strings.CutPrefix(after, ":"); ok {
			return inner, p, true, true
		}
		if after != "" {
			return s, "", false, false
		}
		return inner, "", false, true
	}
	if strings.Count(s, ":") > 1 {
		return s, "", false, false
	}
	if h, p, ok := strings.Cut(s, ":"); ok {
		return h, p, true, false
	}
	return s, "", false, false
}

// parsePort accepts decimal digits only (no sign, no spaces) from 1 to 65535.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	p, _ := strconv.Atoi(s)
	return p, p >= 1 && p <= 65535
}

// parseNetwork recognises an address or CIDR network. ok is false with an empty reason when
// s is no address at all (so it may be a name); a reason says why an address is refused.
func parseNetwork(s string) (prefix netip.Prefix, ok bool, reason string) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if looksLikeAddr(strings.SplitN(s, "/", 2)[0]) {
				return netip.Prefix{}, false, "not a valid network: " + err.Error()
			}
			return netip.Prefix{}, false, ""
		}
		if p.Addr().Is4In6() {
			return netip.Prefix{}, false, "an IPv4-mapped IPv6 network; write the IPv4 network"
		}
		if p != p.Masked() {
			return netip.Prefix{}, false, fmt.Sprintf("host bits set in a network; did you mean %s?", p.Masked())
		}
		return p, true, ""
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		if looksLikeAddr(s) && strings.Contains(s, ":") {
			return netip.Prefix{}, false, "not a valid IPv6 address: " + err.Error()
		}
		return netip.Prefix{}, false, ""
	}
	if a.Zone() != "" {
		return netip.Prefix{}, false, "an address with a zone"
	}
	if a.Is4In6() {
		return netip.Prefix{}, false, "an IPv4-mapped IPv6 address; write the IPv4 address " + a.Unmap().String()
	}
	return netip.PrefixFrom(a, a.BitLen()), true, ""
}

// looksLikeAddr is true for text made only of what addresses are made of, so a broken
// address is reported as one rather than as a bad name.
func looksLikeAddr(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdefABCDEF:.%") == "" && (strings.Contains(s, ":") || strings.Trim(s, "0123456789.") == "")
}

// addrRuleText is the canonical text of an address rule.
func addrRuleText(p netip.Prefix, port int) string {
	s := p.String()
	if p.IsSingleIP() {
		s = p.Addr().String()
	}
	switch {
	case port == 0:
		return s
	case p.Addr().Is6():
		return "[" + s + "]:" + strconv.Itoa(port)
	default:
		return s + ":" + strconv.Itoa(port)
	}
}

// normalizeName lower-cases an ASCII host name, drops one trailing dot and checks its
// labels: letters, digits, '-' and '_' (which some real names carry), 1 to 63 of them.
// A name whose last label is all digits is refused: resolvers read such text as an address
// in forms netip does not (0x7f.1, 2130706433), and that decision belongs to address rules.
func normalizeName(host string) (string, error) {
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 {
			return "", fmt.Errorf("a non-ASCII name")
		}
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "" {
		return "", fmt.Errorf("an empty name")
	}
	if len(name) > maxNameLen {
		return "", fmt.Errorf("a name longer than %d characters", maxNameLen)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", fmt.Errorf("a name with an empty label or one longer than 63 characters")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("a name with the character %q", c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", fmt.Errorf("neither a name nor an address")
	}
	return name, nil
}

// nameFix is the hint for a refused name.
func nameFix(host string) string {
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 {
			return "write an international name in its punycode form (xn--...), as DNS carries it"
		}
	}
	return ruleForms
}
