package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// connectProbe tries a direct TCP connection from inside a sandbox and prints "open" or
// "closed: REASON"; python3 is in every bundled image.
const connectProbe = `import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("open")
except Exception as e:
    print("closed:", e)`

// A sandbox with egress: ["@debian"] reaches Debian's mirror through its proxy over HTTP and
// HTTPS, and nothing else: the npm registry (the same address) is refused by name, with an
// entry in the log; no direct connection, no DNS, no host listener, no other sandbox.
// "sbx egress allow" opens the registry without a restart and "deny" closes it again.
func TestCLIEgress(t *testing.T) {
	needsReSignedHTTPS(t)
	c := newCLI(t)
	name, other := cliRun+"-egress", cliRun+"-egress2"
	c.Write(".sbx.yaml", "egress: ['@debian']\ncaCerts: host\n")
	c.Trust()
	code := func(sb, url string) string {
		t.Helper()
		// %{http_code} is the destination's answer; for HTTPS, a refusal is CONNECT's.
		r := c.Run("exec", "-n", sb, "--", "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{http_connect}", url)
		return r.Stdout
	}
	for _, url := range []string{"http://deb.debian.org/debian/dists/bookworm/Release", debianRelease} {
		if got := code(name, url); !strings.HasPrefix(got, "200 ") {
			t.Errorf("%s: %q, want 200", url, got)
		}
	}
	if got := code(name, "https://registry.npmjs.org/"); got != "000 403" {
		t.Errorf("npm registry over HTTPS: %q, want CONNECT refused with 403", got)
	}
	r := c.Run("exec", "-n", name, "--", "curl", "-sS", "http://registry.npmjs.org/")
	if !strings.Contains(r.Stdout, "denied by the sandbox's egress allowlist (no rule allows it)") || !strings.Contains(r.Stdout, "sbx egress allow "+name+" registry.npmjs.org") {
		t.Errorf("npm registry over HTTP: the refusal does not explain itself: %s", r)
	}

	r = c.Run("egress", "log", name, "--json")
	var allowed, denied bool
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var e egress.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("egress log --json: %v in %q", err, line)
		}
		allowed = allowed || (e.Allowed && e.Host == "deb.debian.org" && e.Rule == "deb.debian.org" && e.Preset == "@debian" && e.BytesDown > 0)
		denied = denied || (!e.Allowed && e.Host == "registry.npmjs.org" && e.Reason == "no rule allows it")
	}
	if r.Code != 0 || !allowed || !denied {
		t.Errorf("egress log --json: want the allowed deb.debian.org with its rule and the denied registry.npmjs.org: %s", r)
	}

	// No way around the proxy: no route, no name lookups.
	probe := func(sb, host string, port int) string {
		t.Helper()
		return strings.TrimSpace(c.Run("exec", "-n", sb, "--", "python3", "-c", connectProbe, host, strconv.Itoa(port)).Stdout)
	}
	if got := probe(name, "203.0.113.80", 80); !strings.HasPrefix(got, "closed") {
		t.Errorf("a direct connection to Debian's mirror: %q", got)
	}
	if r := c.Run("exec", "-n", name, "--", "getent", "hosts", "deb.debian.org"); r.Code == 0 {
		t.Errorf("a name resolves inside: %s", r)
	}

	// The host: a listener on all its addresses, tried through the sandbox network's
	// gateway, the default bridge's gateway and the host's own addresses.
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("HTTP/1.0 200 OK\r\n\r\nhost\n"))
			conn.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	egressNet, err := c.Eng.NetworkInspect(ctx, sandbox.EgressNetworkName(name), network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subnet := netip.MustParsePrefix(egressNet.IPAM.Config[0].Subnet)
	hostAddrs := []string{subnet.Addr().Next().String(), "172.17.0.1"}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				hostAddrs = append(hostAddrs, ipn.IP.String())
			}
		}
	}
	for _, a := range hostAddrs {
		if got := probe(name, a, port); !strings.HasPrefix(got, "closed") {
			t.Errorf("the host listener through %s: %q", a, got)
		}
		if got := code(name, "http://"+net.JoinHostPort(a, strconv.Itoa(port))+"/"); got != "403 000" {
			t.Errorf("the host listener through the proxy at %s: %q, want 403", a, got)
		}
	}

	// Another sandbox with a listener, which answers inside it but not from the first.
	// (Several first commands at once: TestCLIEgressConcurrentFirstCommands.)
	if r := c.Run("create", "-n", other); r.Code != 0 {
		t.Fatalf("create %s: %s", other, r)
	}
	serve := make(chan struct{})
	var served clitest.Result
	go func() {
		defer close(serve)
		served = c.Run("exec", "-n", other, "--", "timeout", "180", "python3", "-m", "http.server", "8000")
	}()
	otherAddr := ""
	// The deadline only fails a listener that never comes: making the other sandbox, its
	// proxy and network took over a minute in a loaded CI run.
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		select {
		case <-serve:
			t.Fatalf("the other sandbox's listener ended before it answered: %s", served)
		default:
		}
		if n, err := c.Eng.NetworkInspect(ctx, sandbox.EgressNetworkName(other), network.InspectOptions{}); err == nil && len(n.IPAM.Config) > 0 {
			p := netip.MustParsePrefix(n.IPAM.Config[0].Subnet)
			a := p.Addr().Next().Next().Next().String() // the sandbox's fixed address
			if probe(other, a, 8000) == "open" {
				otherAddr = a
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if otherAddr == "" {
		t.Fatal("the other sandbox's listener never answered inside it")
	}
	if got := probe(name, otherAddr, 8000); !strings.HasPrefix(got, "closed") {
		t.Errorf("another sandbox directly: %q", got)
	}
	if got := code(name, "http://"+otherAddr+":8000/"); got != "403 000" {
		t.Errorf("another sandbox through the proxy: %q, want 403", got)
	}
	c.Run("stop", other) // ends the listener's exec
	<-serve

	// Runtime changes, no restart.
	if r := c.Run("egress", "allow", name, "registry.npmjs.org"); r.Code != 0 || !strings.Contains(r.Stdout, "allowed at runtime [registry.npmjs.org]") {
		t.Fatalf("egress allow: %s", r)
	}
	if got := code(name, "https://registry.npmjs.org/"); !strings.HasPrefix(got, "200 ") {
		t.Errorf("npm registry after allow: %q", got)
	}
	if r := c.Run("explain", name, "--egress", "registry.npmjs.org"); !strings.Contains(r.Stdout, "allowed  [registry.npmjs.org]") || !strings.Contains(r.Stdout, `allowed: by "registry.npmjs.org"`) {
		t.Errorf("explain after allow: %s", r)
	}
	if r := c.Run("egress", "deny", name, "registry.npmjs.org"); r.Code != 0 {
		t.Fatalf("egress deny: %s", r)
	}
	if got := code(name, "https://registry.npmjs.org/"); got != "000 403" {
		t.Errorf("npm registry after deny: %q", got)
	}
	for _, sb := range []string{name, other} {
		if r := c.Run("rm", "-f", sb); r.Code != 0 {
			t.Errorf("rm: %s", r)
		}
		if _, err := c.Eng.ContainerInspect(ctx, sandbox.ProxyName(sb)); err == nil {
			t.Errorf("rm left the proxy of %s", sb)
		}
		if _, err := c.Eng.NetworkInspect(ctx, sandbox.EgressNetworkName(sb), network.InspectOptions{}); err == nil {
			t.Errorf("rm left the egress network of %s", sb)
		}
	}
}

// The toolchains of the common profile follow the proxy variables: npm with @node, and go
// with @go, whose checksum database Go reaches through proxy.golang.org.
func TestCLIEgressToolchains(t *testing.T) {
	needsReSignedHTTPS(t)
	c := newCLI(t)
	name := cliRun + "-egresstools"
	c.Write(".sbx.yaml", "profile: common\negress: ['@node', '@go']\ncaCerts: host\n")
	c.Trust()
	if r := c.Run("exec", "-n", name, "--", "npm", "view", "left-pad", "version"); r.Code != 0 || strings.TrimSpace(r.Stdout) == "" {
		t.Errorf("npm view: %s", r)
	}
	goMod := "cd /tmp && mkdir -p m && cd m && go mod init example.com/m && go mod download -json golang.org/x/text@v0.14.0"
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", goMod); r.Code != 0 || !strings.Contains(r.Stdout, `"Sum": "h1:`) {
		t.Errorf("go mod download: %s", r)
	}
	r := c.Run("egress", "log", name)
	for _, want := range []string{"allowed  registry.npmjs.org:443  by registry.npmjs.org (@node)", "allowed  proxy.golang.org:443  by proxy.golang.org (@go)"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("egress log has no %q: %s", want, r)
		}
	}
}

// An allowed name that resolves to the proxy's loopback or to the cloud metadata address is
// refused after the lookup, before any connection (403, not a failed connection's 502). The
// proxy's /etc/hosts stands in for a DNS answer no resolver here gives.
func TestCLIEgressRefusesPrivateAnswers(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-egresspriv"
	if r := c.Run("create", "-n", name, "--egress", "loop.test", "--egress", "meta.test"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The engine keeps the file on this machine and binds it read-only: append to it here.
	info, err := c.Eng.ContainerInspect(ctx, sandbox.ProxyName(name))
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := os.OpenFile(info.HostsPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = hosts.WriteString("127.0.0.1 loop.test\n169.254.169.254 meta.test\n")
	if cerr := hosts.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"loop.test", "meta.test"} {
		r := c.Run("exec", "-n", name, "--", "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "http://"+host+"/latest/meta-data/")
		if r.Stdout != "403" {
			t.Errorf("%s: %q, want 403 from the proxy: %s", host, r.Stdout, r)
		}
	}
	r := c.Run("egress", "log", name, "--json")
	refused := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var e egress.Entry
		if json.Unmarshal([]byte(line), &e) == nil && e.Host != "" && !e.Allowed {
			refused[e.Host] = e.Addr + " " + e.Reason
		}
	}
	if !strings.HasPrefix(refused["loop.test"], "127.0.0.1") || !strings.HasPrefix(refused["meta.test"], "169.254.169.254") {
		t.Errorf("the log does not show both refused after the lookup: %v\n%s", refused, r)
	}
}

// Several first commands at once on a sandbox with egress make one sandbox, one proxy and
// one network, and every command runs: before the create lock, one sbx could remove the
// proxy and network the other had made and was starting ("network ... not found", 1 run in 4).
func TestCLIEgressConcurrentFirstCommands(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-egressrace"
	c.Write(".sbx.yaml", "egress: [deb.debian.org]\n")
	c.Trust()
	var wg sync.WaitGroup
	results := make([]clitest.Result, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.Run("exec", "-n", name, "--", "true")
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.Code != 0 {
			t.Errorf("command %d: %s", i, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, kind := range []string{"sandbox", "proxy"} {
		ctr := sandbox.ContainerName(name)
		if kind == "proxy" {
			ctr = sandbox.ProxyName(name)
		}
		if info, err := c.Eng.ContainerInspect(ctx, ctr); err != nil || info.State == nil || !info.State.Running {
			t.Errorf("the %s after the commands: %v", kind, err)
		}
	}
	if r := c.Run("exec", "-n", name, "--", "true"); r.Code != 0 {
		t.Errorf("a command after them: %s", r)
	}
}

// denialFlood asks the proxy (from HTTP_PROXY) for argv[2] denied plain-HTTP requests to
// long distinct names, one connection each, and prints how many it got a 403 for.
const denialFlood = `import os, socket, sys
host, port = os.environ["HTTP_PROXY"].removeprefix("http://").rstrip("/").rsplit(":", 1)
pad, n, denied = sys.argv[1], int(sys.argv[2]), 0
for i in range(n):
    name = "denied-%d-%s.test" % (i, pad)
    s = socket.create_connection((host, int(port)))
    s.sendall(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (name, name)).encode())
    answer = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        answer += b
    s.close()
    denied += answer.startswith(b"HTTP/1.1 403")
print(denied)`

// A sandbox looping requests to a denied host cannot fill the host's disk through the
// proxy's decision log: the two files stay within their bound while rotation drops the
// oldest decisions, and "sbx egress log" says how many.
func TestCLIEgressLogBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		cli  func(t *testing.T) *cli
	}{
		{"root", newCLI},
		{"non-root", func(t *testing.T) *cli { return newCLIAs(t, nonRootUID) }},
	} {
		t.Run(tt.name, func(t *testing.T) { egressLogBounded(t, tt.cli(t)) })
	}
}

func egressLogBounded(t *testing.T, c *cli) {
	name := cliRun + "-egresslog"
	if r := c.Run("create", "-n", name, "--egress", "allowed.test"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	// About 480 bytes a line: 24000 of them are over 11 MiB, past both files' 8 MiB.
	const n = 24000
	r := c.Run("exec", "-n", name, "--", "python3", "-c", denialFlood, strings.Repeat("x", 200), strconv.Itoa(n))
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != strconv.Itoa(n) {
		t.Fatalf("the flood: %s", r)
	}
	path := (&sandbox.StateStore{Dir: filepath.Join(c.Home, ".state", "sbx")}).EgressLogPath(name)
	var onDisk int64
	for _, p := range []string{path, path + ".1"} {
		if st, err := os.Stat(p); err == nil {
			onDisk += st.Size()
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if onDisk > 2*egress.DefaultLogFileMax {
		t.Errorf("the log takes %d bytes on the host, over its bound %d", onDisk, 2*egress.DefaultLogFileMax)
	}
	got, err := egress.ReadLogFile(path, n)
	if err != nil {
		t.Fatal(err)
	}
	if got.Dropped == 0 || int(got.Dropped)+len(got.Entries) != n {
		t.Errorf("dropped %d + kept %d, want %d decisions", got.Dropped, len(got.Entries), n)
	}
	r = c.Run("egress", "log", name, "--tail", strconv.Itoa(n))
	if r.Code != 0 || !strings.Contains(r.Stderr, strconv.FormatInt(got.Dropped, 10)+" earlier decisions were dropped") ||
		!strings.Contains(r.Stdout, fmt.Sprintf("denied   denied-%d-", n-1)) {
		t.Errorf("egress log: code %d, stderr %q, %d bytes of stdout", r.Code, r.Stderr, len(r.Stdout))
	}
}
