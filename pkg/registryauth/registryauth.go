// Package registryauth finds the user's credentials for a container registry in the Docker
// client's config, as docker pull would: a credential helper named for the registry
// (credHelpers), else the config's credential store (credsStore), else the config's own
// auths entry (base64 user:password or an identity token). It reads one file and runs those
// helpers; the caller says where the file is (DOCKER_CONFIG or ~/.docker) and how a helper runs.
package registryauth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/registry"
)

// ConfigFile is the Docker client's config in its directory.
const ConfigFile = "config.json"

// maxConfig bounds what is read of the config file; a real one is a few KiB.
const maxConfig = 1 << 20

// DockerHub is the registry of references without a host, as Domain reports it, and
// hubKey the name the Docker config files its credentials under.
const (
	DockerHub = "docker.io"
	hubKey    = "https://index.docker.io/v1/"
)

// RunHelper runs the credential helper program ("docker-credential-" + its name) with "get"
// and server on its standard input, and returns its standard output.
type RunHelper func(ctx context.Context, program, server string) ([]byte, error)

// Store finds credentials in the Docker config in Dir.
type Store struct {
	Dir    string
	Helper RunHelper // nil: credential helpers are not run, and a registry that names one has no credentials
}

// Auth is the credentials for one registry and where they came from.
type Auth struct {
	registry.AuthConfig
	// Source is "credHelpers docker-credential-NAME", "credsStore docker-credential-NAME" or
	// "auths in PATH"; "" when there are none.
	Source string
}

// Encode is the value of the engine's X-Registry-Auth header; "" without credentials.
func (a Auth) Encode() string {
	if a.Source == "" {
		return ""
	}
	data, _ := json.Marshal(a.AuthConfig)
	return base64.URLEncoding.EncodeToString(data)
}

// Registry is the host[:port] of ref's registry, docker.io for Docker Hub.
func Registry(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return reference.Domain(named), nil
}

type configFile struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		IdentityToken string `json:"identitytoken"`
	} `json:"auths"`
	CredsStore  string            `json:"credsStore"`
	CredHelpers map[string]string `json:"credHelpers"`
}

// Lookup returns the credentials for host, a registry as Registry reports it. No config file
// or no entry for host is no credentials, not an error.
func (s *Store) Lookup(ctx context.Context, host string) (Auth, error) {
	path := filepath.Join(s.Dir, ConfigFile)
	cfg, err := readConfig(path)
	if err != nil || cfg == nil {
		return Auth{}, err
	}
	server := host
	if host == DockerHub {
		server = hubKey
	}
	if name := cfg.CredHelpers[host]; name != "" {
		return s.fromHelper(ctx, "credHelpers", name, server)
	}
	if cfg.CredsStore != "" {
		a, err := s.fromHelper(ctx, "credsStore", cfg.CredsStore, server)
		if err != nil || a.Source != "" {
			return a, err
		}
	}
	for key, e := range cfg.Auths {
		if normalize(key) != host {
			continue
		}
		a := Auth{AuthConfig: registry.AuthConfig{ServerAddress: server, IdentityToken: e.IdentityToken}, Source: "auths in " + path}
		if e.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			user, pass, ok := strings.Cut(string(raw), ":")
			if err != nil || !ok {
				return Auth{}, fmt.Errorf("%s: the auth of %s is not base64 of user:password", path, key)
			}
			a.Username, a.Password = user, pass
		}
		return a, nil
	}
	return Auth{}, nil
}

func readConfig(path string) (*configFile, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the Docker config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxConfig {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxConfig)
	}
	var cfg configFile
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &cfg, nil
}

// normalize turns an auths key ("https://host:5000/v1/", "host:5000") into a registry host
// as Registry reports it.
func normalize(key string) string {
	if key == hubKey || key == "index.docker.io" || key == "https://index.docker.io/v1" {
		return DockerHub
	}
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	host, _, _ := strings.Cut(key, "/")
	return host
}

// notFound is what docker-credential-helpers print for a server they hold nothing for.
const notFound = "credentials not found in native keychain"

func (s *Store) fromHelper(ctx context.Context, kind, name, server string) (Auth, error) {
	program := "docker-credential-" + name
	if s.Helper == nil || strings.ContainsAny(name, `/\`) {
		return Auth{}, fmt.Errorf("the Docker config's %s names %s, which sbx cannot run", kind, program)
	}
	out, err := s.Helper(ctx, program, server)
	if err != nil {
		if bytes.Contains(out, []byte(notFound)) {
			return Auth{}, nil
		}
		return Auth{}, fmt.Errorf("%s get (from the Docker config's %s): %w", program, kind, err)
	}
	var c struct{ Username, Secret string }
	if err := json.Unmarshal(out, &c); err != nil {
		return Auth{}, fmt.Errorf("%s get: its output is not the credentials JSON: %w", program, err)
	}
	a := Auth{AuthConfig: registry.AuthConfig{ServerAddress: server}, Source: kind + " " + program}
	// A helper that holds an identity token says so with this user name.
	if c.Username == "<token>" {
		a.IdentityToken = c.Secret
	} else {
		a.Username, a.Password = c.Username, c.Secret
	}
	return a, nil
}
