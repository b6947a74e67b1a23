package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func mustPolicy(t *testing.T, allow, deny []string, internal ...string) *Policy {
	t.Helper()
	p, err := File{Version: FileVersion, Allow: allow, Deny: deny, Internal: internal}.Policy()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecide(t *testing.T) {
	p := mustPolicy(t,
		[]string{"@python", "*.example.com", "github.com:22", "10.1.2.3:5432", "192.168.0.0/16", "[::1]:80", "@debian"},
		[]string{"evil.example.com", "*.bad.example.com", "192.168.9.0/24", "security.debian.org:80"})
	tests := []struct {
		host string
		port int
		want Decision
	}{
		{"pypi.org", 443, Decision{Allowed: true, Rule: "pypi.org", Preset: "@python"}},
		{"PyPI.org.", 80, Decision{Allowed: true, Rule: "pypi.org", Preset: "@python"}},
		{"pypi.org", 8080, Decision{Reason: "pypi.org allows ports 80 and 443 only, not port 8080"}},
		{"files.pythonhosted.org", 443, Decision{Allowed: true, Rule: "files.pythonhosted.org", Preset: "@python"}},
		{"other.pythonhosted.org", 443, Decision{Reason: "no rule allows it"}},
		{"a.example.com", 443, Decision{Allowed: true, Rule: "*.example.com"}},
		{"a.b.example.com", 80, Decision{Allowed: true, Rule: "*.example.com"}},
		{"example.com", 443, Decision{Reason: "no rule allows it"}},
		{"notexample.com", 443, Decision{Reason: "no rule allows it"}},
		{"github.com", 22, Decision{Allowed: true, Rule: "github.com:22"}},
		{"github.com", 443, Decision{Reason: "github.com:22 allows port 22 only, not port 443"}},
		{"evil.example.com", 443, Decision{Rule: "evil.example.com", Reason: "a deny entry matches"}},
		{"evil.example.com", 8443, Decision{Rule: "evil.example.com", Reason: "a deny entry matches"}},
		{"x.bad.example.com", 443, Decision{Rule: "*.bad.example.com", Reason: "a deny entry matches"}},
		{"security.debian.org", 80, Decision{Rule: "security.debian.org:80", Reason: "a deny entry matches"}},
		{"security.debian.org", 443, Decision{Allowed: true, Rule: "security.debian.org", Preset: "@debian"}},
		// Address literals are decided by address rules only.
		{"10.1.2.3", 5432, Decision{Allowed: true, Rule: "10.1.2.3:5432"}},
		{"10.1.2.3", 443, Decision{Reason: "no address rule allows it (an address is allowed only by an address or network rule)"}},
		{"192.168.1.1", 6379, Decision{Allowed: true, Rule: "192.168.0.0/16"}},
		{"192.168.9.1", 6379, Decision{Rule: "192.168.9.0/24", Reason: "a deny entry matches"}},
		{"::ffff:192.168.1.1", 1, Decision{Allowed: true, Rule: "192.168.0.0/16"}},
		{"::1", 80, Decision{Allowed: true, Rule: "[::1]:80"}},
		{"[::1]", 80, Decision{Allowed: true, Rule: "[::1]:80"}},
		{"::1", 81, Decision{Reason: "no address rule allows it (an address is allowed only by an address or network rule)"}},
		{"fe80::1%eth0", 80, Decision{Reason: "an address with a zone"}},
		// A name that only looks like an address is not one.
		{"2130706433", 80, Decision{Reason: "not a valid host name: neither a name nor an address"}},
		{"bücher.example", 443, Decision{Reason: "not a valid host name: a non-ASCII name"}},
		{"pypi.org", 0, Decision{Reason: "port 0 is out of range"}},
		{"pypi.org", 65536, Decision{Reason: "port 65536 is out of range"}},
	}
	for _, tt := range tests {
		if got := p.Decide(tt.host, tt.port); got != tt.want {
			t.Errorf("Decide(%q, %d) = %+v, want %+v", tt.host, tt.port, got, tt.want)
		}
	}
}

func TestDecideEmptyPolicyDeniesEverything(t *testing.T) {
	p := mustPolicy(t, nil, nil)
	for _, h := range []string{"pypi.org", "127.0.0.1", "::1"} {
		if d := p.Decide(h, 443); d.Allowed || d.Reason == "" {
			t.Errorf("%s: %+v", h, d)
		}
	}
}

// Every reserved class is refused for a name, and an address rule naming the address lets
// it through (on its port, or every port without one).
func TestCheckAddr(t *testing.T) {
	tests := []struct {
		addr, what string
	}{
		{"127.0.0.1", "a loopback address"},
		{"127.1.2.3", "a loopback address"},
		{"::1", "a loopback address"},
		{"0.0.0.0", "an unspecified address (it reaches this host)"},
		{"::", "an unspecified address (it reaches this host)"},
		{"169.254.169.254", "a link-local address (where cloud metadata services answer)"},
		{"fe80::1", "a link-local address (where cloud metadata services answer)"},
		{"10.0.0.1", "a private address (RFC 1918)"},
		{"172.16.0.1", "a private address (RFC 1918)"},
		{"172.31.255.255", "a private address (RFC 1918)"},
		{"192.168.1.1", "a private address (RFC 1918)"},
		{"100.64.0.1", "a shared address (carrier-grade NAT, RFC 6598)"},
		{"100.127.255.255", "a shared address (carrier-grade NAT, RFC 6598)"},
		{"fc00::1", "a unique local address (IPv6 ULA)"},
		{"fd12:3456::1", "a unique local address (IPv6 ULA)"},
		{"224.0.0.1", "a multicast address"},
		{"ff02::1", "a multicast address"},
		{"255.255.255.255", "a reserved address"},
		{"240.0.0.1", "a reserved address"},
		{"fec0::1", "a reserved address"},
		{"64:ff9b:1::1", "a reserved address"},
		{"64:ff9b::7f00:1", "a translation of 127.0.0.1, a loopback address"},
		{"64:ff9b::a9fe:a9fe", "a translation of 169.254.169.254, a link-local address (where cloud metadata services answer)"},
		{"2002:a00:1::1", "a translation of 10.0.0.1, a private address (RFC 1918)"},
		{"::ffff:127.0.0.1", "a loopback address"},
		{"198.51.100.7", "an address internal to the engine (its host or another sandbox)"},
		{"2001:db8:5::9", "an address internal to the engine (its host or another sandbox)"},
	}
	internal := []string{"198.51.100.7", "2001:db8:5::/48"}
	refusing := mustPolicy(t, []string{"allowed.test"}, nil, internal...)
	for _, tt := range tests {
		addr := netip.MustParseAddr(tt.addr)
		shown := addr.Unmap().String()
		want := Decision{Reason: "resolves to " + shown + ", " + tt.what}
		if got := refusing.CheckAddr(addr, 443); got != want {
			t.Errorf("CheckAddr(%s) = %+v, want %+v", tt.addr, got, want)
		}
		rule := shown
		if addr.Unmap().Is6() {
			rule = "[" + shown + "]:443"
		} else {
			rule += ":443"
		}
		for _, allow := range []string{shown, rule} {
			p := mustPolicy(t, []string{"allowed.test", allow}, nil, internal...)
			if got := p.CheckAddr(addr, 443); got != (Decision{Allowed: true, Rule: allow}) {
				t.Errorf("with %q: CheckAddr(%s) = %+v", allow, tt.addr, got)
			}
		}
		// A rule on another port does not name this destination.
		other := strings.Replace(rule, ":443", ":444", 1)
		if got := mustPolicy(t, []string{"allowed.test", other}, nil, internal...).CheckAddr(addr, 443); got != want {
			t.Errorf("with %q: CheckAddr(%s) = %+v", other, tt.addr, got)
		}
	}
}

func TestCheckAddrPublicAndDenied(t *testing.T) {
	p := mustPolicy(t, []string{"allowed.test", "10.0.0.0/8"}, []string{"203.0.113.0/24:443", "10.9.0.0/16"})
	tests := []struct {
		addr string
		port int
		want Decision
	}{
		{"203.0.113.80", 80, Decision{Allowed: true}},
		{"2606:4700::1", 443, Decision{Allowed: true}},
		{"203.0.113.80", 443, Decision{Rule: "203.0.113.0/24:443", Reason: "resolves to 203.0.113.80, which a deny entry matches"}},
		{"10.1.1.1", 443, Decision{Allowed: true, Rule: "10.0.0.0/8"}},
		{"10.9.1.1", 443, Decision{Rule: "10.9.0.0/16", Reason: "resolves to 10.9.1.1, which a deny entry matches"}},
	}
	for _, tt := range tests {
		if got := p.CheckAddr(netip.MustParseAddr(tt.addr), tt.port); got != tt.want {
			t.Errorf("CheckAddr(%s, %d) = %+v, want %+v", tt.addr, tt.port, got, tt.want)
		}
	}
}
