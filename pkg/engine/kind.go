package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
)

// Products sbx tells apart: what they change is where the engine reads a seccomp profile,
// how image names read and how a user namespace maps the sandbox's user.
const (
	ProductDocker = "docker"
	ProductPodman = "podman"
)

// Kind is what an engine is, as far as a sandbox's guarantees depend on it.
type Kind struct {
	Product  string `json:"product"`
	Version  string `json:"version"`
	Rootless bool   `json:"rootless"`
	// CgroupVersion is "1" or "2" ("" when the engine does not say).
	CgroupVersion string `json:"cgroupVersion"`
}

// String names the kind for people: "rootless Podman 4.3.1 (cgroup v1)".
func (k Kind) String() string {
	mode := "rootful"
	if k.Rootless {
		mode = "rootless"
	}
	name := "Docker"
	if k.Product == ProductPodman {
		name = "Podman"
	}
	s := mode + " " + name
	if k.Version != "" {
		s += " " + k.Version
	}
	if k.CgroupVersion != "" {
		s += " (cgroup v" + k.CgroupVersion + ")"
	}
	return s
}

// KindOf reads the kind from the engine's version and info: Podman names its component
// "Podman Engine"; both products list "name=rootless" among their security options when the
// engine runs in a user namespace.
func KindOf(v types.Version, info system.Info) Kind {
	k := Kind{Product: ProductDocker, Version: v.Version, CgroupVersion: info.CgroupVersion}
	if slices.ContainsFunc(v.Components, func(c types.ComponentVersion) bool {
		return strings.HasPrefix(strings.ToLower(c.Name), "podman")
	}) {
		k.Product = ProductPodman
	}
	for _, opt := range info.SecurityOptions {
		if slices.Contains(strings.Split(opt, ","), "name=rootless") {
			k.Rootless = true
		}
	}
	return k
}

// DetectKind asks e what it is.
func DetectKind(ctx context.Context, e Engine) (Kind, error) {
	v, err := e.ServerVersion(ctx)
	if err != nil {
		return Kind{}, fmt.Errorf("asking the engine for its version: %w", err)
	}
	info, err := e.Info(ctx)
	if err != nil {
		return Kind{}, fmt.Errorf("asking the engine about itself: %w", err)
	}
	return Refine(ctx, e, KindOf(v, info)), nil
}

// rawEngine is an engine whose HTTP connection sbx can use for an endpoint the Docker
// client lacks (the real client; a fake has none).
type rawEngine interface {
	HTTPClient() *http.Client
	DaemonHost() string
}

// Refine completes k with what only Podman's own API says: Podman 4's Docker-compatible
// info lists no "name=rootless" when it runs rootless (measured on 4.3.1), its libpod info
// does. k is kept as it is when that cannot be asked.
func Refine(ctx context.Context, e Engine, k Kind) Kind {
	if k.Product != ProductPodman || k.Rootless {
		return k
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := libpod(ctx, e, http.MethodGet, "/info", nil)
	if err != nil {
		return k
	}
	defer resp.Body.Close()
	var info struct {
		Host struct {
			Security struct {
				Rootless bool `json:"rootless"`
			} `json:"security"`
		} `json:"host"`
	}
	if resp.StatusCode == http.StatusOK && json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info) == nil {
		k.Rootless = info.Host.Security.Rootless
	}
	return k
}

// PodmanNetwork is a network as Podman's own API creates it, with what its
// Docker-compatible API cannot ask for: no DNS server on the network.
type PodmanNetwork struct {
	Name       string            `json:"name"`
	Driver     string            `json:"driver"`
	Internal   bool              `json:"internal"`
	DNSEnabled bool              `json:"dns_enabled"`
	Labels     map[string]string `json:"labels,omitempty"`
	Options    map[string]string `json:"options,omitempty"`
	Subnets    []PodmanSubnet    `json:"subnets"`
}

// PodmanSubnet is one subnet of a PodmanNetwork.
type PodmanSubnet struct {
	Subnet string `json:"subnet"`
}

// ErrSubnetUsed is a network create Podman refused because its subnet is in use.
var ErrSubnetUsed = errors.New("the subnet is in use")

// CreatePodmanNetwork creates n through Podman's own API. Podman's compatible API gives
// every network but its default a DNS server that forwards names it does not know to the
// host's resolvers, internal networks too (measured on 4.3.1 with netavark).
func CreatePodmanNetwork(ctx context.Context, e Engine, n PodmanNetwork) error {
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	resp, err := libpod(ctx, e, http.MethodPost, "/networks/create", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
		return nil
	}
	var answer struct {
		Message string `json:"message"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&answer)
	msg := answer.Message
	if msg == "" {
		msg = resp.Status
	}
	switch {
	case resp.StatusCode == http.StatusConflict:
		return cerrdefs.ErrConflict.WithMessage(msg)
	case strings.Contains(msg, "already used"):
		return fmt.Errorf("%w: %s", ErrSubnetUsed, msg)
	}
	return fmt.Errorf("podman: %s", msg)
}

// libpod sends a request to Podman's own API (v4, which 4.0 and later serve) on e's
// connection, which the Docker client dials whatever host the URL names.
func libpod(ctx context.Context, e Engine, method, path string, body []byte) (*http.Response, error) {
	raw, ok := e.(rawEngine)
	if !ok {
		return nil, errors.New("this engine client cannot reach Podman's own API")
	}
	u, err := client.ParseHostURL(raw.DaemonHost())
	if err != nil {
		return nil, err
	}
	base := "http://" + u.Host
	switch u.Scheme {
	case "unix", "npipe", "ssh":
		base = "http://podman"
	case "https":
		base = "https://" + u.Host
	}
	req, err := http.NewRequestWithContext(ctx, method, base+"/v4.0.0/libpod"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return raw.HTTPClient().Do(req)
}

// LimitsProblem says why the engine cannot enforce memory, CPU and pids limits, "" when it
// says it can. Its word is not taken as proof: sbx checks each sandbox's limits after create.
func LimitsProblem(k Kind, info system.Info) string {
	if k.Rootless && k.CgroupVersion == "1" {
		// Neither product delegates cgroup v1 controllers to an unprivileged user: Podman drops
		// the limits, rootless Docker records them and applies none (both measured here).
		return k.String() + " cannot apply memory, CPU or pids limits: a rootless engine needs cgroup v2 for them"
	}
	var missing []string
	if !info.MemoryLimit {
		missing = append(missing, "memory")
	}
	if !info.CPUCfsQuota {
		missing = append(missing, "CPU")
	}
	if !info.PidsLimit {
		missing = append(missing, "pids")
	}
	if len(missing) > 0 {
		return fmt.Sprintf("%s cannot apply %s limits (its cgroups lack the controllers)", k, strings.Join(missing, ", "))
	}
	return ""
}

// NormalizeImage is an image name as Docker writes it: Podman answers docker.io/library/NAME
// and localhost/NAME for what Docker calls NAME.
func NormalizeImage(name string) string {
	for _, p := range []string{"docker.io/library/", "localhost/"} {
		if rest, ok := strings.CutPrefix(name, p); ok && rest != "" {
			return rest
		}
	}
	return name
}
