package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultHost is where a local engine listens when nothing says otherwise.
const DefaultHost = "unix:///var/run/docker.sock"

// Endpoint is the engine address sbx will dial and why it chose it.
type Endpoint struct {
	Host    string `json:"host"`
	Source  string `json:"source"`            // "DOCKER_HOST", "context foo (DOCKER_CONTEXT)", "default"
	Context string `json:"context,omitempty"` // Docker context name, when one was used
	TLS     *TLS   `json:"tls,omitempty"`
}

// TLS holds client certificate files for a tcp:// endpoint.
type TLS struct {
	CAFile     string `json:"caFile,omitempty"`
	CertFile   string `json:"certFile,omitempty"`
	KeyFile    string `json:"keyFile,omitempty"`
	SkipVerify bool   `json:"skipVerify,omitempty"`
}

// ResolveEndpoint finds the engine to use: the context named by flagContext (sbx's --context)
// or by SBX_CONTEXT, as the docker CLI's --context beats DOCKER_HOST; else what the docker CLI
// would use: DOCKER_HOST, else the context named by DOCKER_CONTEXT or by currentContext in
// the CLI config, else the default socket. Only the user chooses the engine: no project file
// takes part. It reads files but never dials.
func ResolveEndpoint(getenv func(string) string, home, flagContext string) (Endpoint, error) {
	configDir := DockerConfigDir(getenv, home)
	switch {
	case flagContext != "":
		return namedContext(getenv, configDir, flagContext, "--context")
	case getenv("SBX_CONTEXT") != "":
		return namedContext(getenv, configDir, getenv("SBX_CONTEXT"), "SBX_CONTEXT")
	}
	return dockerEndpoint(getenv, configDir)
}

// DockerConfigDir is the docker CLI's configuration directory: DOCKER_CONFIG, else ~/.docker.
func DockerConfigDir(getenv func(string) string, home string) string {
	if dir := getenv("DOCKER_CONFIG"); dir != "" {
		return dir
	}
	return filepath.Join(home, ".docker")
}

// namedContext is the endpoint of context name, chosen by source; "default" is the engine
// DOCKER_HOST names, else the default socket, as for the docker CLI.
func namedContext(getenv func(string) string, configDir, name, source string) (Endpoint, error) {
	if name != "default" {
		return contextEndpoint(configDir, name, source)
	}
	if host := getenv("DOCKER_HOST"); host != "" {
		return dockerEndpoint(getenv, configDir)
	}
	return Endpoint{Host: DefaultHost, Source: "context default (" + source + ")", Context: "default"}, nil
}

// Contexts lists the names of the docker CLI's contexts, "default" first and the rest sorted.
func Contexts(getenv func(string) string, home string) ([]string, error) {
	metaDir := filepath.Join(DockerConfigDir(getenv, home), "contexts", "meta")
	entries, err := os.ReadDir(metaDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading docker contexts: %w", err)
	}
	var names []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(metaDir, e.Name(), "meta.json"))
		if err != nil {
			continue
		}
		var meta struct{ Name string }
		if json.Unmarshal(data, &meta) == nil && meta.Name != "" && meta.Name != "default" {
			names = append(names, meta.Name)
		}
	}
	slices.Sort(names)
	return append([]string{"default"}, names...), nil
}

func dockerEndpoint(getenv func(string) string, configDir string) (Endpoint, error) {
	if host := getenv("DOCKER_HOST"); host != "" {
		ep := Endpoint{Host: host, Source: "DOCKER_HOST"}
		if getenv("DOCKER_TLS_VERIFY") != "" {
			certDir := getenv("DOCKER_CERT_PATH")
			if certDir == "" {
				certDir = configDir
			}
			ep.TLS = &TLS{
				CAFile:   filepath.Join(certDir, "ca.pem"),
				CertFile: filepath.Join(certDir, "cert.pem"),
				KeyFile:  filepath.Join(certDir, "key.pem"),
			}
		}
		return ep, nil
	}

	name, source := getenv("DOCKER_CONTEXT"), "DOCKER_CONTEXT"
	if name == "" {
		var err error
		name, err = currentContext(configDir)
		if err != nil {
			return Endpoint{}, err
		}
		source = filepath.Join(configDir, "config.json")
	}
	if name == "" || name == "default" {
		return Endpoint{Host: DefaultHost, Source: "default"}, nil
	}
	return contextEndpoint(configDir, name, source)
}

func currentContext(configDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(configDir, "config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading docker CLI config: %w", err)
	}
	var cfg struct {
		CurrentContext string `json:"currentContext"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("parsing %s: %w", filepath.Join(configDir, "config.json"), err)
	}
	return cfg.CurrentContext, nil
}

// contextEndpoint reads the docker endpoint of a context from the CLI's context store, where
// each context lives in a directory named by the SHA-256 of its name.
func contextEndpoint(configDir, name, source string) (Endpoint, error) {
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	metaPath := filepath.Join(configDir, "contexts", "meta", id, "meta.json")
	data, err := os.ReadFile(metaPath)
	if errors.Is(err, fs.ErrNotExist) {
		return Endpoint{}, fmt.Errorf("docker context %q (from %s) not found in %s", name, source, filepath.Join(configDir, "contexts"))
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("reading docker context %q: %w", name, err)
	}
	var meta struct {
		Endpoints map[string]struct {
			Host          string `json:"Host"`
			SkipTLSVerify bool   `json:"SkipTLSVerify"`
		} `json:"Endpoints"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return Endpoint{}, fmt.Errorf("parsing %s: %w", metaPath, err)
	}
	docker, ok := meta.Endpoints["docker"]
	if !ok || docker.Host == "" {
		return Endpoint{}, fmt.Errorf("docker context %q has no docker endpoint (%s)", name, metaPath)
	}
	ep := Endpoint{Host: docker.Host, Source: fmt.Sprintf("context %s (%s)", name, source), Context: name}
	tlsDir := filepath.Join(configDir, "contexts", "tls", id, "docker")
	tls := &TLS{SkipVerify: docker.SkipTLSVerify}
	for file, dst := range map[string]*string{"ca.pem": &tls.CAFile, "cert.pem": &tls.CertFile, "key.pem": &tls.KeyFile} {
		if _, err := os.Stat(filepath.Join(tlsDir, file)); err == nil {
			*dst = filepath.Join(tlsDir, file)
		}
	}
	if *tls != (TLS{}) && !strings.HasPrefix(docker.Host, "unix://") {
		ep.TLS = tls
	}
	return ep, nil
}

// Remote says whether the engine at host runs on another machine, so it cannot see this
// one's files: an ssh:// endpoint, or tcp:// to an address that is not loopback. A Unix
// socket and a loopback address may still be a VM's engine, which sbx does not guess at.
func Remote(host string) bool {
	if strings.HasPrefix(host, "ssh://") {
		return true
	}
	rest, ok := strings.CutPrefix(host, "tcp://")
	if !ok {
		return false
	}
	h, _, err := net.SplitHostPort(rest)
	if err != nil {
		h = rest
	}
	if h == "localhost" {
		return false
	}
	ip := net.ParseIP(h)
	return ip == nil || !ip.IsLoopback()
}
