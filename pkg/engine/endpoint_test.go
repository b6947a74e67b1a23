package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// writeContext lays out a context the way the docker CLI's context store does.
func writeContext(t *testing.T, configDir, name, host string, withTLS bool) {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	meta := filepath.Join(configDir, "contexts", "meta", id)
	if err := os.MkdirAll(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	data := `{"Name":"` + name + `","Metadata":{},"Endpoints":{"docker":{"Host":"` + host + `","SkipTLSVerify":false}}}`
	if err := os.WriteFile(filepath.Join(meta, "meta.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if withTLS {
		tlsDir := filepath.Join(configDir, "contexts", "tls", id, "docker")
		if err := os.MkdirAll(tlsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.pem", "cert.pem", "key.pem"} {
			if err := os.WriteFile(filepath.Join(tlsDir, f), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestResolveEndpoint(t *testing.T) {
	home := t.TempDir()
	configDir := filepath.Join(home, ".docker")
	writeContext(t, configDir, "remote", "tcp://10.0.0.9:2376", true)
	writeContext(t, configDir, "colima", "unix:///home/u/.colima/docker.sock", false)
	if err := os.WriteFile(filepath.Join(configDir, "config.json"), []byte(`{"currentContext":"colima"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	otherHome := t.TempDir()

	tests := []struct {
		name       string
		home       string
		env        map[string]string
		wantHost   string
		wantSource string
		wantTLS    bool
		wantErr    string
	}{
		{name: "nothing set", home: otherHome, wantHost: DefaultHost, wantSource: "default"},
		{name: "DOCKER_HOST wins over context", home: home, env: map[string]string{"DOCKER_HOST": "tcp://127.0.0.1:2375", "DOCKER_CONTEXT": "remote"},
			wantHost: "tcp://127.0.0.1:2375", wantSource: "DOCKER_HOST"},
		{name: "DOCKER_HOST with TLS verify", home: home, env: map[string]string{"DOCKER_HOST": "tcp://h:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/certs"},
			wantHost: "tcp://h:2376", wantSource: "DOCKER_HOST", wantTLS: true},
		{name: "DOCKER_CONTEXT", home: home, env: map[string]string{"DOCKER_CONTEXT": "remote"},
			wantHost: "tcp://10.0.0.9:2376", wantSource: "context remote (DOCKER_CONTEXT)", wantTLS: true},
		{name: "currentContext in config.json", home: home,
			wantHost: "unix:///home/u/.colima/docker.sock", wantSource: "context colima (" + filepath.Join(configDir, "config.json") + ")"},
		{name: "default context", home: home, env: map[string]string{"DOCKER_CONTEXT": "default"}, wantHost: DefaultHost, wantSource: "default"},
		{name: "DOCKER_CONFIG moves the store", home: otherHome, env: map[string]string{"DOCKER_CONFIG": configDir, "DOCKER_CONTEXT": "remote"},
			wantHost: "tcp://10.0.0.9:2376", wantSource: "context remote (DOCKER_CONTEXT)", wantTLS: true},
		{name: "missing context", home: home, env: map[string]string{"DOCKER_CONTEXT": "ghost"}, wantErr: `docker context "ghost" (from DOCKER_CONTEXT) not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, err := ResolveEndpoint(env(tt.env), tt.home, "")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ep.Host != tt.wantHost || ep.Source != tt.wantSource {
				t.Errorf("got %s from %q, want %s from %q", ep.Host, ep.Source, tt.wantHost, tt.wantSource)
			}
			if (ep.TLS != nil) != tt.wantTLS {
				t.Errorf("TLS = %+v, want TLS %v", ep.TLS, tt.wantTLS)
			}
		})
	}
}

func TestResolveEndpointTLSFiles(t *testing.T) {
	ep, err := ResolveEndpoint(env(map[string]string{"DOCKER_HOST": "tcp://h:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/certs"}), "/home/x", "")
	if err != nil {
		t.Fatal(err)
	}
	want := TLS{CAFile: "/certs/ca.pem", CertFile: "/certs/cert.pem", KeyFile: "/certs/key.pem"}
	if *ep.TLS != want {
		t.Errorf("TLS = %+v, want %+v", *ep.TLS, want)
	}
}
