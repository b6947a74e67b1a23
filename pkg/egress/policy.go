package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Policy is a compiled allowlist: the rules that allow, the deny entries that override them,
// and the extra internal networks an allowed name must not resolve into. It is immutable, so
// the proxy swaps a whole Policy on reload and one request sees one Policy throughout.
type Policy struct {
	allow    []Rule
	deny     []Rule
	internal []netip.Prefix
}

// NewPolicy builds a Policy from expanded rules (see Expand). internal lists networks refused
// after resolution like the reserved ranges (the engine host's addresses, other sandboxes'
// networks): an address rule re-allows them, a name rule does not. Write IPv4 networks as
// IPv4: resolved addresses are compared unmapped.
func NewPolicy(allow, deny []Rule, internal []netip.Prefix) *Policy {
	return &Policy{allow: slices.Clone(allow), deny: slices.Clone(deny), internal: slices.Clone(internal)}
}

// Allow returns the allow rules in the order they decide.
func (p *Policy) Allow() []Rule { return slices.Clone(p.allow) }

// Deny returns the deny entries.
func (p *Policy) Deny() []Rule { return slices.Clone(p.deny) }

// Internal returns the extra internal networks.
func (p *Policy) Internal() []netip.Prefix { return slices.Clone(p.internal) }

// Decision is the answer to "may the sandbox reach this?".
type Decision struct {
	Allowed bool
	// Rule is the canonical text of the rule that decided: the allow rule that matched, the
	// deny entry that refused, or for an address check the address rule that let a reserved
	// address through. Empty when no rule decided (nothing allowed it, or a reserved address).
	Rule string
	// Preset is the preset Rule came from, if any.
	Preset string
	// Reason says why a destination was refused; empty when allowed.
	Reason string
}

func allowedBy(r Rule) Decision { return Decision{Allowed: true, Rule: r.Text, Preset: r.Preset} }

func deniedBy(r Rule, reason string) Decision {
	return Decision{Rule: r.Text, Preset: r.Preset, Reason: reason}
}

// Decide answers for a destination as a client names it: a host name, or an address literal
// (IPv6 with or without brackets), and a port. A name is decided by name rules only, before
// anything is resolved; an address literal by address rules only. Deny entries win over
// allow rules; among allow rules the first that matches decides.
func (p *Policy) Decide(host string, port int) Decision {
	if port < 1 || port > 65535 {
		return Decision{Reason: fmt.Sprintf("port %d is out of range", port)}
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		if a.Zone() != "" {
			return Decision{Reason: "an address with a zone"}
		}
		return p.decideAddrLiteral(a.Unmap(), port)
	}
	name, err := normalizeName(host)
	if err != nil {
		return Decision{Reason: "not a valid host name: " + err.Error()}
	}
	for _, r := range p.deny {
		if r.matchName(name) && r.matchPort(port, true) {
			return deniedBy(r, "a deny entry matches")
		}
	}
	var portsOnly *Rule
	for i, r := range p.allow {
		if !r.matchName(name) {
			continue
		}
		if r.matchPort(port, false) {
			return allowedBy(r)
		}
		if portsOnly == nil {
			portsOnly = &p.allow[i]
		}
	}
	if portsOnly != nil {
		return Decision{Reason: fmt.Sprintf("%s allows %s only, not port %d", portsOnly.Text, portsText(*portsOnly), port)}
	}
	return Decision{Reason: "no rule allows it"}
}

// portsText names the ports an allow rule opens.
func portsText(r Rule) string {
	switch {
	case r.Port != 0:
		return "port " + strconv.Itoa(r.Port)
	case r.IsAddr():
		return "every port"
	default:
		return "ports 80 and 443"
	}
}

func (p *Policy) decideAddrLiteral(addr netip.Addr, port int) Decision {
	if d, ok := p.addrRule(addr, port); ok {
		return d
	}
	return Decision{Reason: "no address rule allows it (an address is allowed only by an address or network rule)"}
}

// addrRule applies the address rules, deny entries first; ok is false when none matches.
func (p *Policy) addrRule(addr netip.Addr, port int) (Decision, bool) {
	for _, r := range p.deny {
		if r.matchAddr(addr) && r.matchPort(port, true) {
			return deniedBy(r, "a deny entry matches"), true
		}
	}
	for _, r := range p.allow {
		if r.matchAddr(addr) && r.matchPort(port, false) {
			return allowedBy(r), true
		}
	}
	return Decision{}, false
}

// CheckAddr answers for an address an allowed name resolved to, before the proxy connects
// to it: deny entries refuse it; an address rule that names it lets it through; otherwise a
// reserved address (loopback, link-local, unspecified, private, shared, unique local,
// multicast, reserved) or one in the internal networks is refused, and any other is allowed
// with an empty Rule (the name rule decided). A refusal's Reason follows the name:
// "metadata.test " + "resolves to 169.254.169.254, a link-local address (...)".
func (p *Policy) CheckAddr(addr netip.Addr, port int) Decision {
	addr = addr.WithZone("").Unmap()
	if d, ok := p.addrRule(addr, port); ok {
		if !d.Allowed {
			d.Reason = "resolves to " + addr.String() + ", which a deny entry matches"
		}
		return d
	}
	if what := reservedClass(addr); what != "" {
		return Decision{Reason: "resolves to " + addr.String() + ", " + what}
	}
	for _, n := range p.internal {
		if n.Contains(addr) {
			return Decision{Reason: "resolves to " + addr.String() + ", an address internal to the engine (its host or another sandbox)"}
		}
	}
	return Decision{Allowed: true}
}
