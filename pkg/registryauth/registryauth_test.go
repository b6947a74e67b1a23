package registryauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// helpers fakes docker-credential-* programs: each knows some servers.
func helpers(known map[string]map[string]string, calls *[]string) RunHelper {
	return func(_ context.Context, program, server string) ([]byte, error) {
		*calls = append(*calls, program+" "+server)
		if c, ok := known[program][server]; ok {
			return []byte(c), nil
		}
		return []byte(notFound + "\n"), errors.New("exit status 1")
	}
}

func TestLookup(t *testing.T) {
	cfg := `{
	  "auths": {
	    "https://index.docker.io/v1/": {"auth": "` + b64("hubuser:hubpass") + `"},
	    "127.0.0.1:5000": {"auth": "` + b64("alice:pa:ss") + `"},
	    "https://reg.example:8443/v2/": {"identitytoken": "tok"},
	    "store.example": {"auth": "` + b64("file:fallback") + `"}
	  },
	  "credsStore": "desktop",
	  "credHelpers": {"ecr.example": "ecr-login"}
	}`
	var calls []string
	s := &Store{Dir: writeConfig(t, cfg), Helper: helpers(map[string]map[string]string{
		"docker-credential-ecr-login": {"ecr.example": `{"Username":"AWS","Secret":"ecr-secret"}`},
		"docker-credential-desktop":   {"desk.example": `{"Username":"<token>","Secret":"desk-token"}`},
	}, &calls)}
	for _, tt := range []struct {
		host, user, pass, token, source string
	}{
		{host: "docker.io", user: "hubuser", pass: "hubpass", source: "auths in "},
		{host: "127.0.0.1:5000", user: "alice", pass: "pa:ss", source: "auths in "},
		{host: "reg.example:8443", token: "tok", source: "auths in "},
		{host: "ecr.example", user: "AWS", pass: "ecr-secret", source: "credHelpers docker-credential-ecr-login"},
		{host: "desk.example", token: "desk-token", source: "credsStore docker-credential-desktop"},
		// The store knows nothing of it: the file's own entry.
		{host: "store.example", user: "file", pass: "fallback", source: "auths in "},
		{host: "other.example"},
	} {
		a, err := s.Lookup(context.Background(), tt.host)
		if err != nil || a.Username != tt.user || a.Password != tt.pass || a.IdentityToken != tt.token || !strings.HasPrefix(a.Source, tt.source) || (tt.source == "") != (a.Source == "") {
			t.Errorf("%s: %+v, %v", tt.host, a, err)
		}
	}
	if strings.Join(calls, ";") != "docker-credential-desktop https://index.docker.io/v1/;docker-credential-desktop 127.0.0.1:5000;docker-credential-desktop reg.example:8443;docker-credential-ecr-login ecr.example;docker-credential-desktop desk.example;docker-credential-desktop store.example;docker-credential-desktop other.example" {
		t.Errorf("helpers asked: %v", calls)
	}
}

func TestEncode(t *testing.T) {
	if (Auth{}).Encode() != "" {
		t.Error("no credentials encode as something")
	}
	a, err := (&Store{Dir: writeConfig(t, `{"auths":{"r.example":{"auth":"`+b64("u:p")+`"}}}`)}).Lookup(context.Background(), "r.example")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.URLEncoding.DecodeString(a.Encode())
	var got map[string]string
	if err != nil || json.Unmarshal(raw, &got) != nil || got["username"] != "u" || got["password"] != "p" || got["serveraddress"] != "r.example" {
		t.Errorf("encoded %s (%v)", raw, err)
	}
}

func TestLookupFailures(t *testing.T) {
	ctx := context.Background()
	if a, err := (&Store{Dir: t.TempDir()}).Lookup(ctx, "docker.io"); err != nil || a.Source != "" {
		t.Errorf("no config file: %+v, %v", a, err)
	}
	for _, tt := range []struct{ name, cfg, says string }{
		{"not JSON", `{`, "config.json"},
		{"not user:password", `{"auths":{"r.example":{"auth":"` + b64("nocolon") + `"}}}`, "is not base64 of user:password"},
		{"a helper sbx has no way to run", `{"credHelpers":{"r.example":"gcr"}}`, "names docker-credential-gcr, which sbx cannot run"},
		{"a helper outside PATH", `{"credsStore":"../../bin/evil"}`, "which sbx cannot run"},
	} {
		s := &Store{Dir: writeConfig(t, tt.cfg)}
		if tt.name == "a helper outside PATH" {
			s.Helper = func(context.Context, string, string) ([]byte, error) {
				t.Fatal("ran a helper with a path in its name")
				return nil, nil
			}
		}
		if _, err := s.Lookup(ctx, "r.example"); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	big := writeConfig(t, `{"auths":{}, "x":"`+strings.Repeat("a", maxConfig)+`"}`)
	if _, err := (&Store{Dir: big}).Lookup(ctx, "r.example"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a config above the bound: %v", err)
	}
}

func TestRegistry(t *testing.T) {
	for ref, want := range map[string]string{
		"debian:bookworm-slim":                              "docker.io",
		"127.0.0.1:5000/team/tool:1":                        "127.0.0.1:5000",
		"ghcr.io/org/img@sha256:" + strings.Repeat("a", 64): "ghcr.io",
	} {
		if got, err := Registry(ref); err != nil || got != want {
			t.Errorf("Registry(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
	if _, err := Registry("Not A Ref"); err == nil {
		t.Error("an invalid reference has a registry")
	}
}
