package egress

import (
	"net/netip"
)

// addrClass is a range of addresses an allowed name must not resolve to, unless an address
// rule names the address: the proxy can reach its host and the engine's networks, which a
// sandbox must not, and a name is the sandbox's choice (or its DNS owner's) to point anywhere.
type addrClass struct {
	what     string // completes "ADDR is ..."
	prefixes []netip.Prefix
}

var reservedClasses = []addrClass{
	{"a loopback address", prefixes("127.0.0.0/8", "::1/128")},
	{"an unspecified address (it reaches this host)", prefixes("0.0.0.0/8", "::/128")},
	{"a link-local address (where cloud metadata services answer)", prefixes("169.254.0.0/16", "fe80::/10")},
	{"a private address (RFC 1918)", prefixes("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")},
	{"a shared address (carrier-grade NAT, RFC 6598)", prefixes("100.64.0.0/10")},
	{"a unique local address (IPv6 ULA)", prefixes("fc00::/7")},
	{"a multicast address", prefixes("224.0.0.0/4", "ff00::/8")},
	{"a reserved address", prefixes(
		"240.0.0.0/4",    // reserved, and the limited broadcast 255.255.255.255
		"fec0::/10",      // deprecated site-local
		"::/96",          // deprecated IPv4-compatible
		"64:ff9b:1::/48", // local-use NAT64 (RFC 8215): a private translator's network
		"100::/64")},     // discard-only
}

// The documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32)
// are not reserved here: test networks such as this project's use them for real services.

// Translated IPv6 ranges carry an IPv4 address inside; it is checked as well, so that
// 64:ff9b::7f00:1 is as refused as 127.0.0.1.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// reservedClass names the class of a reserved address, or returns "" for one that may be
// reached by name. addr must be unmapped.
func reservedClass(addr netip.Addr) string {
	for _, c := range reservedClasses {
		for _, p := range c.prefixes {
			if p.Contains(addr) {
				return c.what
			}
		}
	}
	if inner, ok := embeddedIPv4(addr); ok {
		if what := reservedClass(inner); what != "" {
			return "a translation of " + inner.String() + ", " + what
		}
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address a NAT64 or 6to4 address stands for.
func embeddedIPv4(addr netip.Addr) (netip.Addr, bool) {
	b := addr.As16()
	switch {
	case nat64.Contains(addr):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(addr):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}
