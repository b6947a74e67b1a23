package cmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/cacerts"
)

// debianRelease is fetched over HTTPS from Debian's mirror, the only host these tests reach.
const debianRelease = "https://deb.debian.org/debian/dists/bookworm/Release"

// needsReSignedHTTPS skips unless HTTPS to Debian's mirror is signed, as on this project's
// machine, by a CA the host added to its system store (a TLS-inspecting proxy): only then
// does caCerts: host make a difference to check.
func needsReSignedHTTPS(t *testing.T) {
	t.Helper()
	pemData, err := cacerts.Read(cacerts.Host, cacerts.Options{})
	if err != nil {
		t.Skipf("caCerts: host: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemData)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: &tls.Config{RootCAs: roots}}).DialContext(ctx, "tcp", "deb.debian.org:443")
	if err != nil {
		t.Skipf("HTTPS to deb.debian.org is not signed by a CA this host added: %v", err)
	}
	conn.Close()
}

// With caCerts: host, the tools in a sandbox trust the host's added CAs: curl, python and git
// reach Debian's mirror over HTTPS through this machine's re-signing proxy, through the agent
// and through the engine's exec (-u); the bundle is read-only inside and rm removes it from
// the host. A sandbox without caCerts fails on the certificate.
func TestCLICACertsHost(t *testing.T) {
	needsReSignedHTTPS(t)
	c := newCLI(t)
	withCA, without, common := cliRun+"-ca", cliRun+"-noca", cliRun+"-cacommon"
	c.Write(".sbx.yaml", "network: bridge\nsandboxes:\n  "+withCA+":\n    caCerts: host\n  "+without+": {}\n  "+
		common+":\n    caCerts: host\n    profile: common\n")
	if r := c.Run("exec", "-n", withCA, "--", "true"); r.Code != 125 || !strings.Contains(r.Stderr, `caCerts "host": loosens the sandbox`) {
		t.Fatalf("an untrusted project file added CAs: %s", r)
	}
	c.Trust()

	curl := []string{"curl", "-sS", debianRelease, "-o", "/dev/null", "-w", "%{http_code}"}
	python := []string{"python3", "-c", "import urllib.request; print(urllib.request.urlopen('" + debianRelease + "').status)"}
	for _, via := range [][]string{{"exec", "-n", withCA}, {"exec", "-n", withCA, "-u", "1000:1000"}} {
		if r := c.Run(append(append(via, "--"), curl...)...); r.Code != 0 || r.Stdout != "200" {
			t.Errorf("%v curl: %s", via, r)
		}
		if r := c.Run(append(append(via, "--"), python...)...); r.Code != 0 || r.Stdout != "200\n" {
			t.Errorf("%v python: %s", via, r)
		}
	}
	// Debian's mirror is no git server: past TLS, git finds no repository.
	if r := c.Run("exec", "-n", withCA, "--", "git", "ls-remote", "https://deb.debian.org/debian/"); r.Code != 128 || !strings.Contains(r.Stderr, "not found") {
		t.Errorf("git: %s", r)
	}
	if r := c.Run("exec", "-n", withCA, "--", "sh", "-c", "echo x >/etc/sbx/ca/ca-certificates.crt"); r.Code == 0 || !strings.Contains(r.Stderr, "Read-only file system") {
		t.Errorf("the bundle is writable from inside: %s", r)
	}
	// The toolchains of the common profile: Node.js and Go.
	node := "require('https').get('" + debianRelease + "', r => { console.log(r.statusCode); r.resume() })"
	if r := c.Run("exec", "-n", common, "--", "node", "-e", node); r.Code != 0 || r.Stdout != "200\n" {
		t.Errorf("node: %s", r)
	}
	goProg := `package main; import ("fmt"; "net/http"); func main() { r, err := http.Get("` + debianRelease + `"); if err != nil { panic(err) }; fmt.Println(r.StatusCode) }`
	if r := c.Run("exec", "-n", common, "--", "sh", "-c", `mkdir -p /tmp/ca && cd /tmp/ca && printf %s "$0" >main.go && go run main.go`, goProg); r.Code != 0 || r.Stdout != "200\n" {
		t.Errorf("go: %s", r)
	}

	r := c.Run(append([]string{"exec", "-n", without, "--"}, curl...)...)
	if r.Code != 60 || r.Stdout != "000" || !strings.Contains(r.Stderr, "SSL certificate problem") {
		t.Errorf("without caCerts, curl: %s", r)
	}
	if r := c.Run(append([]string{"exec", "-n", without, "--"}, python...)...); r.Code != 1 || !strings.Contains(r.Stderr, "CERTIFICATE_VERIFY_FAILED") {
		t.Errorf("without caCerts, python: %s", r)
	}

	dir := filepath.Join(c.Home, ".state", "sbx", "ca", withCA)
	if _, err := os.Stat(filepath.Join(dir, cacerts.BundleName)); err != nil {
		t.Fatalf("no bundle on the host: %v", err)
	}
	if r := c.Run("rm", "-f", withCA, without, common); r.Code != 0 {
		t.Fatalf("rm: %s", r)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("rm left the CA directory: %v", err)
	}
}

// A user who is not root keeps the bundle in a state directory private to them; the sandbox
// user, another uid, still reads it through the mount.
func TestCLICACertsAsAnotherUser(t *testing.T) {
	needsReSignedHTTPS(t)
	c := newCLIAs(t, nonRootUID)
	c.Write(".sbx.yaml", "network: bridge\ncaCerts: host\n")
	c.Trust()
	if r := c.Run("exec", "--", "curl", "-sS", debianRelease, "-o", "/dev/null", "-w", "%{http_code}"); r.Code != 0 || r.Stdout != "200" {
		t.Errorf("curl: %s", r)
	}
	ca := filepath.Join(c.Home, ".state", "sbx", "ca")
	if fi, err := os.Stat(ca); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want it private to its user", ca, fi.Mode().Perm())
	}
}
