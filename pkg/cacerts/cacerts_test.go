//go:build unix

package cacerts_test

import (
	"bytes"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/cacerts"
	"github.com/sbx-sandbox/sbx/pkg/cacerts/cacertstest"
)

func write(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func symlink(t *testing.T, target, link string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return link
}

func TestReadFilesAndDirectories(t *testing.T) {
	dir := t.TempDir()
	a, b, c := cacertstest.CA(t, "a"), cacertstest.CA(t, "b"), cacertstest.CA(t, "c")
	bundle := write(t, filepath.Join(dir, "bundle.pem"), join(a, []byte("# a comment openssl leaves\n"), b, a))
	write(t, filepath.Join(dir, "certs", "2-b.pem"), b)
	write(t, filepath.Join(dir, "certs", "1-a.CRT"), a)
	write(t, filepath.Join(dir, "certs", "notes.txt"), []byte("not read"))
	write(t, filepath.Join(dir, "certs", "sub", "c.crt"), c) // no recursion
	if err := syscall.Mkfifo(filepath.Join(dir, "certs", "fifo.pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		value string
		want  string
	}{
		{bundle, "a b"},
		{filepath.Join(dir, "certs"), "a b"},
		{filepath.Join(dir, "certs") + "/", "a b"},
		{"", ""},
	} {
		got, err := cacerts.Read(tt.value, cacerts.Options{})
		if err != nil {
			t.Fatalf("%s: %v", tt.value, err)
		}
		if g := strings.Join(cacertstest.Names(t, got), " "); g != tt.want {
			t.Errorf("%s: got certificates %q, want %q", tt.value, g, tt.want)
		}
	}
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestReadHost(t *testing.T) {
	dir := t.TempDir()
	debian := filepath.Join(dir, "usr-local-share")
	write(t, filepath.Join(debian, "corp.crt"), cacertstest.CA(t, "corp"))
	write(t, filepath.Join(debian, "extra", "lab.crt"), cacertstest.CA(t, "lab")) // update-ca-certificates looks below too
	anchors := filepath.Join(dir, "anchors")
	write(t, filepath.Join(anchors, "proxy.pem"), cacertstest.CA(t, "proxy"))
	got, err := cacerts.Read(cacerts.Host, cacerts.Options{HostDirs: []string{filepath.Join(dir, "missing"), debian, anchors}})
	if err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(cacertstest.Names(t, got), " "); g != "corp lab proxy" {
		t.Errorf("got %q", g)
	}

	_, err = cacerts.Read(cacerts.Host, cacerts.Options{HostDirs: []string{filepath.Join(dir, "missing")}})
	wantRefusal(t, err, "the host has no added CA certificates in "+filepath.Join(dir, "missing"), "update-ca-certificates")
}

func wantRefusal(t *testing.T, err error, reason, fix string) {
	t.Helper()
	var e *cacerts.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *cacerts.Error, got %v", err)
	}
	if !strings.Contains(e.Reason, reason) || !strings.Contains(e.Fix, fix) {
		t.Errorf("got reason %q fix %q, want %q and %q", e.Reason, e.Fix, reason, fix)
	}
}

func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("secret")})
	der, _ := pem.Decode(cacertstest.CA(t, "der"))
	huge := make([]byte, cacerts.MaxBytes+1)
	copy(huge, cacertstest.CA(t, "big"))
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, value, reason, fix string
	}{
		{"missing", write(t, filepath.Join(dir, "x"), nil) + "-gone", "does not exist", "relative one starts at the directory of the file"},
		{"relative", "certs/ca.pem", "not an absolute path", "full path"},
		{"not PEM", write(t, filepath.Join(dir, "der.crt"), der.Bytes), "holds no PEM certificate", "openssl x509 -inform der"},
		{"empty file", write(t, filepath.Join(dir, "empty.pem"), nil), "holds no PEM certificate", ""},
		{"private key", write(t, filepath.Join(dir, "key.pem"), join(cacertstest.CA(t, "ok"), key)), "holds a PRIVATE KEY block", "only the CA certificates"},
		{"bad certificate", write(t, filepath.Join(dir, "bad.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})), "does not parse", ""},
		{"over the cap", write(t, filepath.Join(dir, "big.pem"), huge), "take more than 4 MiB", "only the CA certificates"},
		{"empty directory", filepath.Join(dir, "empty"), "holds no .crt or .pem file", ""},
		{"device", "/dev/null", "neither a regular file nor a directory", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cacerts.Read(tt.value, cacerts.Options{})
			wantRefusal(t, err, tt.reason, tt.fix)
		})
	}
}

// A link inside the project is never followed, wherever it points: a cloned repository or a
// rw sandbox may have made it. Links outside are the user's.
func TestReadLinksInTheProject(t *testing.T) {
	dir := t.TempDir()
	project, outside := filepath.Join(dir, "project"), filepath.Join(dir, "outside")
	ca := cacertstest.CA(t, "corp")
	write(t, filepath.Join(outside, "corp.pem"), ca)
	write(t, filepath.Join(project, "certs", "own.pem"), cacertstest.CA(t, "own"))
	symlink(t, filepath.Join(outside, "corp.pem"), filepath.Join(project, "planted.pem"))
	symlink(t, outside, filepath.Join(project, "planted-dir"))
	symlink(t, filepath.Join(outside, "corp.pem"), filepath.Join(project, "linked-certs", "a.pem"))
	symlink(t, "own.pem", filepath.Join(project, "certs", "z-inner.pem")) // even one staying inside
	symlink(t, filepath.Join(outside, "corp.pem"), filepath.Join(outside, "mine.pem"))
	symlink(t, project, filepath.Join(outside, "to-project"))
	opts := cacerts.Options{Guard: project}

	for _, tt := range []struct{ value, link string }{
		{filepath.Join(project, "planted.pem"), filepath.Join(project, "planted.pem")},
		{filepath.Join(project, "planted-dir", "corp.pem"), filepath.Join(project, "planted-dir")},
		{filepath.Join(project, "planted-dir"), filepath.Join(project, "planted-dir")},
		{filepath.Join(project, "linked-certs"), filepath.Join(project, "linked-certs", "a.pem")},
		{filepath.Join(project, "certs"), filepath.Join(project, "certs", "z-inner.pem")},
		{filepath.Join(outside, "to-project", "planted.pem"), filepath.Join(project, "planted.pem")},
	} {
		_, err := cacerts.Read(tt.value, opts)
		wantRefusal(t, err, tt.link+" is a symbolic link inside the project "+project, "name the file the link points to")
	}
	for value, want := range map[string]string{
		filepath.Join(outside, "mine.pem"):                       "corp",
		filepath.Join(outside, "to-project", "certs", "own.pem"): "own",
	} {
		got, err := cacerts.Read(value, opts)
		if err != nil {
			t.Fatalf("%s: %v", value, err)
		}
		if g := strings.Join(cacertstest.Names(t, got), " "); g != want {
			t.Errorf("%s: got %q, want %q", value, g, want)
		}
	}
}

func TestBundle(t *testing.T) {
	a, b, c := cacertstest.CA(t, "a"), cacertstest.CA(t, "b"), cacertstest.CA(t, "c")
	system := join([]byte("# an image's comment\n"), a, b, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: []byte("x")}))
	got := cacerts.Bundle(system, join(b, c))
	if g := strings.Join(cacertstest.Names(t, got), " "); g != "a b c" {
		t.Errorf("got %q", g)
	}
	// Whole markers only: a certificate's base64 may hold "CRL" by chance (it did, in CI).
	if bytes.Contains(got, []byte("# an image's comment")) || bytes.Contains(got, []byte("BEGIN X509 CRL")) {
		t.Errorf("kept more than certificates:\n%s", got)
	}
	if g := cacertstest.Names(t, cacerts.Bundle(nil, c)); len(g) != 1 {
		t.Errorf("an image without a bundle: got %v", g)
	}
}

func TestEnv(t *testing.T) {
	got := strings.Join(cacerts.Env(), " ")
	for _, name := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"} {
		if !strings.Contains(got, name+"=/etc/sbx/ca/ca-certificates.crt") {
			t.Errorf("%s is not set to the bundle: %s", name, got)
		}
	}
}
