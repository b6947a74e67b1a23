// Package egress is a sandbox's egress allowlist: the rules (names, wildcards, addresses,
// networks, presets), the one function that decides by them, and the filtering proxy that
// enforces them from outside the sandbox, with its decision log. It knows nothing of Docker,
// of configuration files or of commands: sbx starts a Server in a proxy container that
// shares an internal network with the sandbox alone, writes its rules file, and reads its
// log (README.md in this directory has the design, the formats and why sbx has its own
// proxy rather than squid).
//
// # Rules
//
// Expand turns a list as a config writes it into Rules, presets (Presets) expanded in
// place and marked with the preset they came from. A name allows ports 80 and 443 unless it
// names one ("github.com:22"); "*.example.com" matches every subdomain but not
// example.com; names are ASCII (punycode for international ones), compared lower-case
// without a trailing dot. An address or network ("10.1.2.3", "[::1]:80", "10.0.0.0/8:5432")
// allows every port unless it names one. A deny entry closes every port of what it matches
// unless it names one, and wins over every allow rule.
//
// # Decisions
//
// Policy.Decide answers for a destination as a client names it: a name by name rules only,
// before anything is resolved; an address literal by address rules only. For an allowed
// name the proxy resolves it once and passes every address through Policy.CheckAddr, which
// refuses loopback, link-local (cloud metadata), unspecified, private (RFC 1918), shared
// (CGNAT), unique local, multicast and reserved addresses, NAT64 and 6to4 translations of
// them, and the caller's internal networks (the engine's host, other sandboxes), unless an
// address rule names the address. The proxy connects only to an address it checked.
//
// # Proxy
//
// Server speaks HTTP/1.1 to the sandbox: absolute-URI requests for plain HTTP, whose Host
// header must agree with the URI, and CONNECT tunnels for everything else (HTTPS, git over
// ssh). A refusal is a 403 whose text names sbx, the reason and the setting to change.
// Heads are capped (MaxHeaderBytes), connections too (MaxConns), and every connection ends
// after IdleTimeout without a byte moving; bodies stream, spliced between sockets when the
// length is known. The Resolver and the Dialer are injected.
//
// The rules come from a File that the server polls (size, modification time and inode)
// and re-reads on a change or on Reload; a file that does not parse or compile is logged
// and the rules in effect stay. WriteFile replaces the file atomically; a proxy in a
// container must see it through a mount of its directory.
//
// # Log
//
// Each request is one JSON line (Entry) on the writer the caller gives: logged at once when
// refused, when it ends (with its bytes and duration) when allowed. Reloads are lines with
// "event":"reload". Lines are written whole, one Write each, under a lock, and cut to stay
// far below MaxLogLine. The server does not rotate its writer; LogFile, the writer the proxy
// uses, keeps the file and one rotated file (path + ".1") of at most DefaultLogFileMax
// each, and starts each new file with a "rotate" line counting the entries neither file
// holds any more. ReadLogFile and Follow read both back for "sbx egress log", skipping
// lines that are too long or not entries and leaving an unfinished last line for later.
package egress
