package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// A sandbox with egress rules has no route out and no DNS: it shares a network of its own,
// internal and with com.docker.network.bridge.inhibit_ipv4 (so the host has no address on
// it), with one other container, its proxy. The proxy is also on the engine's default
// bridge, listens only on its address on the sandbox's network, and runs this sbx's own
// binary ("sbx egress proxy", pkg/egress) under the sandboxes' hardening. sbx writes its
// rules file and the proxy its log in $XDG_STATE_HOME/sbx/egress/NAME, mounted as a
// directory because egress.WriteFile renames.

// EgressRange is where sbx takes each egress network's subnet from: a /28 a sandbox (.1 is
// the engine's gateway address, unused with inhibit_ipv4; .2 the proxy, .3 the sandbox),
// 4096 of them, away from the engine's default pools (172.17.0.0/12 and 192.168.0.0/16).
// Subnets any network of the engine or of its host uses are skipped (usedSubnets).
var EgressRange = netip.MustParsePrefix("10.213.0.0/16")

const (
	egressBits = 28
	// ProxyPort is where the proxy listens on the sandbox's network.
	ProxyPort = 3128
	// LabelRole marks the containers sbx makes beside a sandbox: "egress-proxy".
	LabelRole = "dev.sbx.role"
	roleProxy = "egress-proxy"
	// proxyDir is where the proxy container sees the sandbox's egress directory.
	proxyDir = "/egress"
	// proxyRulesDir is where the proxy sees the rules' directory, read-only.
	proxyRulesDir = proxyDir + "/" + egressRulesDir
	// egressRulesDir holds the rules in a sandbox's egress directory: only the host writes it.
	egressRulesDir = "rules"
	// proxyReady is the file the proxy writes once it listens (cmd/egress).
	proxyReady = "ready"
	// proxyNobody runs the proxy when sbx runs as root: it needs no user of the host's.
	proxyNobody = 65534
)

// Where the sandbox reaches its proxy through a socket (egressOverSocket).
const (
	// ProxyLoopback is where the sandbox's agent relays to the proxy's socket.
	ProxyLoopback = "127.0.0.1:3128"
	// EgressSocketMountPath is where the sandbox sees the proxy socket's directory.
	EgressSocketMountPath = "/run/sbx-egress"
	// ProxySocket is the proxy's socket in that directory.
	ProxySocket = "proxy.sock"
	// egressSocketSubdir holds the socket in the egress directory: the sandbox sees nothing
	// else of it (the log, the rules).
	egressSocketSubdir = "socket"
)

// Files in a sandbox's egress directory.
const (
	EgressRulesFile = "rules.json"
	EgressLogFile   = "egress.log"
)

// EgressNetworkName is the network sandbox NAME shares with its proxy.
func EgressNetworkName(name string) string { return "sbx-" + name + "-egress" }

// ProxyName is the container of sandbox NAME's proxy. "sbx_" can begin no sandbox's container
// name ("sbx-" + a name), and a suffix could (a sandbox may be called NAME-proxy).
func ProxyName(name string) string { return "sbx_proxy-" + name }

// egressSocketDir is the directory of sandbox name's proxy socket on the host.
func (s *StateStore) egressSocketDir(name string) string {
	return filepath.Join(s.DirIn(AreaEgress, name), egressSocketSubdir)
}

// egressRules is the path of sandbox name's rules file on the host.
func (s *StateStore) egressRules(name string) string {
	return filepath.Join(s.DirIn(AreaEgress, name), egressRulesDir, EgressRulesFile)
}

// egressAddrs are the proxy's and the sandbox's addresses in an egress subnet.
func egressAddrs(subnet netip.Prefix) (proxy, sandbox netip.Addr) {
	proxy = subnet.Addr().Next().Next()
	return proxy, proxy.Next()
}

// ProxyURL is the proxy as the sandbox's tools are told of it.
func ProxyURL(subnet netip.Prefix) string {
	proxy, _ := egressAddrs(subnet)
	return "http://" + netip.AddrPortFrom(proxy, ProxyPort).String()
}

// egressEnv adds to env the variables that send the sandbox's tools through the proxy at
// proxyURL: both cases, as curl reads only http_proxy in lower case and others only upper
// case; npm, pip, git, go and apt read these. A variable the user set stays.
func egressEnv(env map[string]string, proxyURL string) map[string]string {
	out := map[string]string{}
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		out[name] = proxyURL
	}
	out["NO_PROXY"], out["no_proxy"] = "localhost,127.0.0.1", "localhost,127.0.0.1"
	for name, value := range env {
		out[name] = value
	}
	return out
}

// hasEgress reports whether the sandbox was made with egress rules, so with a proxy.
func (s *Sandbox) hasEgress() bool { return len(s.egressConfigured()) > 0 }

// pickSubnet returns the first /28 of EgressRange that overlaps none of used.
func pickSubnet(used []netip.Prefix) (netip.Prefix, error) {
	size := uint64(1) << (32 - egressBits)
	base := EgressRange.Addr().As4()
	start := uint64(base[0])<<24 | uint64(base[1])<<16 | uint64(base[2])<<8 | uint64(base[3])
	count := uint64(1) << (egressBits - EgressRange.Bits())
	for i := range count {
		n := start + i*size
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), egressBits)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, nil
		}
	}
	return netip.Prefix{}, errs.Failure(fmt.Errorf("no free subnet for an egress network: all %d /%d subnets of %s are in use", count, egressBits, EgressRange),
		"remove sandboxes with egress you no longer need (sbx rm, sbx prune), or networks of the engine's that use that range")
}

// usedSubnets lists the subnets of every network of the engine, and those the engine's host
// has an address in (another engine's bridge, a VPN, the LAN), which the engine does not
// check for a subnet it is given: a sandbox's proxy there would be unreachable or route its
// traffic to the wrong network.
func (m *Manager) usedSubnets(ctx context.Context) ([]netip.Prefix, error) {
	list, err := m.Engine.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, errs.Engine("listing networks", err)
	}
	var used []netip.Prefix
	if m.HostNetworks != nil {
		used = append(used, m.HostNetworks()...)
	}
	for _, n := range list {
		for _, c := range n.IPAM.Config {
			if p, err := netip.ParsePrefix(c.Subnet); err == nil {
				used = append(used, p.Masked())
			}
		}
	}
	return used, nil
}

// egressLabels are the labels of what sbx makes beside sandbox in (its proxy and network):
// sbx's own that name it, and the user's extra ones.
func egressLabels(in SpecInput) map[string]string {
	labels := map[string]string{}
	for k, v := range in.ExtraLabels {
		if !strings.HasPrefix(k, labelPrefix) {
			labels[k] = v
		}
	}
	labels[LabelManaged] = "true"
	labels[LabelName] = in.Name
	labels[LabelProject] = in.ProjectRoot
	labels[LabelCreatedAt] = in.CreatedAt.UTC().Format(time.RFC3339)
	labels[LabelVersion] = in.Version
	return labels
}

// EgressNetworkSpec is the network sandbox name shares with its proxy: internal, and without
// an address of the host's on it (inhibit_ipv4), so nothing on it reaches the host or out.
func EgressNetworkSpec(labels map[string]string, subnet netip.Prefix) network.CreateOptions {
	return network.CreateOptions{Driver: "bridge", Internal: true, Labels: labels,
		IPAM: &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet.String()}}},
		Options: map[string]string{
			"com.docker.network.bridge.inhibit_ipv4": "true",
			"com.docker.network.bridge.enable_icc":   "true", // the sandbox talks to its proxy
			// Only the sandbox and its proxy are on it: the largest MTU halves the packets
			// of the extra hop (a 200 MiB download through the proxy: 0.26 s to 0.18 s here).
			"com.docker.network.driver.mtu": "65520",
		}}
}

// ensureEgressNetwork creates sandbox name's egress network in a free subnet, or adopts the
// one an earlier create left, and returns its subnet. Another sbx may take a subnet between
// the listing and the create: the engine refuses the overlap, and the next one is tried.
func (m *Manager) ensureEgressNetwork(ctx context.Context, name string, labels map[string]string) (netip.Prefix, error) {
	if subnet, err := m.egressSubnet(ctx, name); err == nil || !cerrdefs.IsNotFound(err) {
		return subnet, err
	}
	used, err := m.usedSubnets(ctx)
	if err != nil {
		return netip.Prefix{}, err
	}
	for range 8 {
		subnet, err := pickSubnet(used)
		if err != nil {
			return subnet, err
		}
		err = m.createEgressNetwork(ctx, name, labels, subnet)
		switch {
		case err == nil:
			return subnet, nil
		case cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "overlap"):
			return m.egressSubnet(ctx, name)
		case strings.Contains(err.Error(), "overlap") || errors.Is(err, engine.ErrSubnetUsed):
			used = append(used, subnet)
		default:
			return netip.Prefix{}, errs.Engine(fmt.Sprintf("creating the egress network of sandbox %q", name), err)
		}
	}
	return netip.Prefix{}, errs.Failure(fmt.Errorf("creating the egress network of sandbox %q: every subnet tried was taken meanwhile", name), "try again")
}

// createEgressNetwork creates sandbox name's egress network in subnet. On Podman, whose
// compatible API gives it a DNS server forwarding any name to the host's resolvers (a way out
// past the proxy) and cannot be asked for none, it goes through Podman's own API.
func (m *Manager) createEgressNetwork(ctx context.Context, name string, labels map[string]string, subnet netip.Prefix) error {
	f, err := m.facts(ctx)
	if err != nil {
		return err
	}
	spec := EgressNetworkSpec(labels, subnet)
	if f.kind.Product != engine.ProductPodman {
		_, err := m.Engine.NetworkCreate(ctx, EgressNetworkName(name), spec)
		return err
	}
	return engine.CreatePodmanNetwork(ctx, m.Engine, engine.PodmanNetwork{
		Name: EgressNetworkName(name), Driver: "bridge", Internal: true, DNSEnabled: false, Labels: labels,
		Options: map[string]string{"mtu": spec.Options["com.docker.network.driver.mtu"]},
		Subnets: []engine.PodmanSubnet{{Subnet: subnet.String()}},
	})
}

// egressSubnet is the subnet of sandbox name's egress network; a NotFound error when there
// is none, a NotManagedError when sbx did not make it.
func (m *Manager) egressSubnet(ctx context.Context, name string) (netip.Prefix, error) {
	n, err := m.Engine.NetworkInspect(ctx, EgressNetworkName(name), network.InspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return netip.Prefix{}, err
	}
	if err != nil {
		return netip.Prefix{}, errs.Engine(fmt.Sprintf("inspecting the egress network of sandbox %q", name), err)
	}
	if n.Labels[LabelManaged] != "true" || n.Labels[LabelName] != name {
		return netip.Prefix{}, &NotManagedError{Container: "network " + EgressNetworkName(name)}
	}
	for _, c := range n.IPAM.Config {
		if p, err := netip.ParsePrefix(c.Subnet); err == nil && p.Addr().Is4() && p.Bits() <= 30 {
			return p.Masked(), nil
		}
	}
	return netip.Prefix{}, errs.Failure(fmt.Errorf("the egress network of sandbox %q has no IPv4 subnet", name),
		fmt.Sprintf("remove it with: sbx rm -f %s", name))
}

// ProxyInput is what ProxySpec needs.
type ProxyInput struct {
	Name   string
	Binary string // this sbx's binary on the host
	Dir    string // the sandbox's egress directory on the host
	Subnet netip.Prefix
	// UID is the user the proxy runs as: sbx's own, or nobody when sbx runs as root.
	UID, GID int
	Labels   map[string]string
	// Socket makes the proxy listen on ProxySocket in its directory's egressSocketSubdir,
	// on the outward network alone, rather than on Subnet (egressOverSocket).
	Socket bool
}

// ProxySpec is the proxy container of a sandbox: sbx's binary, read-only, on sbx's helper
// image (nothing of the sandbox's image, no healthcheck), on a read-only root, with no
// capabilities, no new privileges, sbx's seccomp profile, an init, and small memory and
// process limits; it listens only on its address on the sandbox's network. Its directory is
// mounted nosuid, nodev and noexec (hostDirMount); its rules are read-only to it (a directory only the host writes, so the host's rename of a new file shows
// through); its log directory is writable (it rotates the log there).
func ProxySpec(in ProxyInput) (*container.Config, *container.HostConfig, *network.NetworkingConfig) {
	proxy, _ := egressAddrs(in.Subnet)
	listen, netMode := netip.AddrPortFrom(proxy, ProxyPort).String(), EgressNetworkName(in.Name)
	if in.Socket {
		listen, netMode = "unix:"+proxyDir+"/"+egressSocketSubdir+"/"+ProxySocket, OutwardNetwork
	}
	labels := map[string]string{LabelRole: roleProxy}
	for k, v := range in.Labels {
		labels[k] = v
	}
	stop := 2
	cfg := helperSpec(&container.Config{
		Cmd: []string{"egress", "proxy", "--sandbox", in.Name, "--listen", listen,
			"--rules", proxyRulesDir + "/" + EgressRulesFile, "--log", proxyDir + "/" + EgressLogFile, "--ready", proxyDir + "/" + proxyReady},
		User:        strconv.Itoa(in.UID) + ":" + strconv.Itoa(in.GID),
		Labels:      labels,
		Hostname:    ProxyName(in.Name),
		StopTimeout: &stop,
	})
	seccomp, _ := defaultSeccomp()
	init, pids := true, int64(64)
	host := &container.HostConfig{
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true", "seccomp=" + seccomp},
		NetworkMode:    container.NetworkMode(netMode),
		Init:           &init,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig:      container.LogConfig{Type: logDriver, Config: map[string]string{"max-size": logMaxSize, "max-file": "1"}},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: in.Binary, Target: helperBinary, ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			hostDirMount(in.Dir, proxyDir),
			// Read-only, so a plain bind (the engine refuses a read-only volume of its own).
			{Type: mount.TypeBind, Source: filepath.Join(in.Dir, egressRulesDir), Target: proxyRulesDir, ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
		},
		Resources: container.Resources{Memory: 128 << 20, MemorySwap: 128 << 20, PidsLimit: &pids},
	}
	net := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		EgressNetworkName(in.Name): {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: proxy.String()}},
	}}
	if in.Socket {
		net = &network.NetworkingConfig{}
	}
	return cfg, host, net
}

// OutwardNetwork is the network every egress proxy reaches the world through: a bridge sbx
// makes once and shares, with the largest MTU, as the sandbox's network to its proxy has.
// TCP takes the smaller of both ends' segment sizes, so a destination behind a 1500-byte
// link is unaffected, while a download from this machine or its bridges moves in a tenth of
// the packets. The proxy refuses private and host addresses itself, so sharing it gives a
// sandbox nothing of another's.
const OutwardNetwork = "sbx-egress-out"

// roleOutward marks the outward network.
const roleOutward = "egress-outward"

// ensureOutwardNetwork makes OutwardNetwork when it is missing. A network of that name that
// sbx did not make is refused, never joined.
func (m *Manager) ensureOutwardNetwork(ctx context.Context) error {
	for range 2 {
		n, err := m.Engine.NetworkInspect(ctx, OutwardNetwork, network.InspectOptions{})
		switch {
		case err == nil && (n.Labels[LabelManaged] != "true" || n.Labels[LabelRole] != roleOutward):
			return &NotManagedError{Container: "network " + OutwardNetwork}
		case err == nil:
			return nil
		case !cerrdefs.IsNotFound(err):
			return errs.Engine("inspecting the egress proxies' outward network", err)
		}
		_, err = m.Engine.NetworkCreate(ctx, OutwardNetwork, network.CreateOptions{Driver: "bridge",
			Labels:  map[string]string{LabelManaged: "true", LabelRole: roleOutward},
			Options: map[string]string{"com.docker.network.driver.mtu": "65520"}})
		if err == nil {
			return nil
		}
		if !cerrdefs.IsConflict(err) { // another sbx made it meanwhile: look again
			return errs.Engine("creating the egress proxies' outward network", err)
		}
	}
	return nil
}

// egressInternal lists the addresses the proxy refuses after resolving, besides the reserved
// ranges: the gateways (the engine's host) and subnets of the outward network and of the
// engine's default bridge, this machine's own addresses (the host, when the engine is
// local), the egress range, and the sandbox's subnet.
func (m *Manager) egressInternal(ctx context.Context, subnet netip.Prefix) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, name := range []string{OutwardNetwork, "bridge"} {
		n, err := m.Engine.NetworkInspect(ctx, name, network.InspectOptions{})
		if err != nil {
			return nil, errs.Engine("inspecting network "+name, err)
		}
		for _, c := range n.IPAM.Config {
			if a, err := netip.ParseAddr(c.Gateway); err == nil {
				add(a.String())
			}
			if p, err := netip.ParsePrefix(c.Subnet); err == nil {
				add(p.Masked().String())
			}
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if addr, ok := netip.AddrFromSlice(ipn.IP); ok {
					add(addr.Unmap().String())
				}
			}
		}
	}
	add(EgressRange.String())
	if subnet.IsValid() {
		add(subnet.String())
	}
	return out, nil
}

// proxyUser is who the proxy runs as: sbx's user, or nobody for root, which gets the
// egress directory.
func proxyUser() (uid, gid int) {
	if os.Getuid() == 0 {
		return proxyNobody, proxyNobody
	}
	return os.Getuid(), os.Getgid()
}

// egressOverSocket reports whether a sandbox on an engine of kind reaches its proxy through
// a Unix socket, with no network of its own, rather than over a network it shares with the
// proxy alone. A rootful Podman's networks, internal ones too, give this machine an address
// on them (Docker's inhibit_ipv4 has no Podman counterpart: a way to the host's services
// past the proxy) and get no forwarding rule, so the sandbox's traffic to its proxy is the
// host firewall's to judge (measured on 4.3 with netavark: beside Docker, whose FORWARD
// policy is DROP, the connect times out). A rootless Podman's networks live in its own
// network namespace, where that address is not this machine's.
func egressOverSocket(kind engine.Kind) bool {
	return kind.Product == engine.ProductPodman && !kind.Rootless
}

// EgressPath says how a sandbox with egress rules reaches its proxy on an engine of kind,
// for explain.
func EgressPath(kind engine.Kind) string {
	if egressOverSocket(kind) {
		return "the proxy's socket, which sbx's agent relays " + ProxyLoopback + " to: the sandbox has no network (a rootful Podman's networks give this machine an address on them)"
	}
	return "an internal network it shares with its proxy alone"
}

// createEgress makes sandbox in's way to its proxy (a network, with in.EgressSubnet set to
// its subnet, or the directory of the proxy's socket, in.EgressSocketDir), its rules file
// and its proxy container; a proxy an earlier create left is removed first, so it runs this
// sbx with these rules.
func (m *Manager) createEgress(ctx context.Context, in *SpecInput) error {
	if m.State == nil {
		return errs.Failure(fmt.Errorf("sandbox %q: egress needs sbx's state directory for the proxy's rules and log", in.Name), "")
	}
	bin, err := os.Executable()
	if err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: finding sbx's own binary for its proxy: %w", in.Name, err), "")
	}
	f, err := m.facts(ctx)
	if err != nil {
		return err
	}
	socket := egressOverSocket(f.kind)
	labels := egressLabels(*in)
	var subnet netip.Prefix
	if !socket {
		if subnet, err = m.ensureEgressNetwork(ctx, in.Name, labels); err != nil {
			return err
		}
	}
	dir := m.State.DirIn(AreaEgress, in.Name)
	uid, gid := proxyUser()
	err = mountDir(dir, 0o700)
	if err == nil && os.Getuid() == 0 {
		err = os.Chown(dir, uid, gid) // the proxy writes its log and ready file there
	}
	if err == nil && socket {
		// The proxy makes its socket there (0666: the sandbox's user is not the proxy's),
		// a stale one from an earlier start included.
		sockDir := m.State.egressSocketDir(in.Name)
		if err = os.MkdirAll(sockDir, 0o755); err == nil && os.Getuid() == 0 {
			err = os.Chown(sockDir, uid, gid)
		}
	}
	if err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: making its egress directory: %w", in.Name, err), "")
	}
	if err := m.ensureOutwardNetwork(ctx); err != nil {
		return err
	}
	internal, err := m.egressInternal(ctx, subnet)
	if err != nil {
		return err
	}
	// Owned by the host's user, who alone writes it; the proxy (nobody, when sbx is root)
	// reads it.
	if err := os.MkdirAll(filepath.Join(dir, egressRulesDir), 0o755); err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: making its egress rules directory: %w", in.Name, err), "")
	}
	if err := m.ensureHelperImage(ctx); err != nil {
		return err
	}
	if err := egress.WriteFile(m.State.egressRules(in.Name), egress.File{Allow: in.Config.Egress, Internal: internal}); err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: writing its egress rules: %w", in.Name, err), "")
	}
	if err := m.removeProxy(ctx, in.Name); err != nil {
		return err
	}
	if f.kind.Rootless {
		// The engine's user namespace maps its root, not the user's uid, to the user who owns
		// the directory; without capabilities that root is no stronger than the user.
		uid, gid = 0, 0
	}
	cfg, host, netCfg := ProxySpec(ProxyInput{Name: in.Name, Binary: bin, Dir: dir, Subnet: subnet, UID: uid, GID: gid, Labels: labels, Socket: socket})
	if err := m.engineSecurityOpts(ctx, host); err != nil {
		return err
	}
	if err := m.engineHostDirs(ctx, host); err != nil {
		return err
	}
	resp, err := m.Engine.ContainerCreate(ctx, cfg, host, netCfg, nil, ProxyName(in.Name))
	if err != nil {
		return errs.Engine(fmt.Sprintf("creating the egress proxy of sandbox %q", in.Name), err)
	}
	if socket {
		in.EgressSocketDir = m.State.egressSocketDir(in.Name)
		return nil
	}
	if err := m.Engine.NetworkConnect(ctx, OutwardNetwork, resp.ID, nil); err != nil {
		return errs.Engine(fmt.Sprintf("connecting the egress proxy of sandbox %q to the %s network", in.Name, OutwardNetwork), err)
	}
	in.EgressSubnet = subnet
	return nil
}

// proxyReadyWait bounds how long a start waits for the proxy to listen.
const proxyReadyWait = 15 * time.Second

// startProxy starts sandbox name's proxy, when it is not running, and waits until it
// listens (its ready file appears), so the sandbox's first request finds it.
func (m *Manager) startProxy(ctx context.Context, name string) error {
	info, err := m.Engine.ContainerInspect(ctx, ProxyName(name))
	if cerrdefs.IsNotFound(err) {
		return errs.Failure(fmt.Errorf("sandbox %q: its egress proxy (container %s) is gone", name, ProxyName(name)),
			fmt.Sprintf("recreate the sandbox with: sbx create -n %s --replace", name))
	}
	if err != nil {
		return errs.Engine(fmt.Sprintf("inspecting the egress proxy of sandbox %q", name), err)
	}
	if info.Config == nil || info.Config.Labels[LabelRole] != roleProxy || info.Config.Labels[LabelName] != name {
		return &NotManagedError{Container: ProxyName(name)}
	}
	if info.State != nil && info.State.Running {
		if info.State.Paused {
			if err := m.Engine.ContainerUnpause(ctx, info.ID); err != nil {
				return errs.Engine(fmt.Sprintf("resuming the egress proxy of sandbox %q", name), err)
			}
		}
		return nil
	}
	ready := filepath.Join(m.State.DirIn(AreaEgress, name), proxyReady)
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return errs.Failure(fmt.Errorf("sandbox %q: clearing its proxy's ready file: %w", name, err), "")
	}
	if err := m.Engine.ContainerStart(ctx, info.ID, container.StartOptions{}); err != nil {
		return errs.Engine(fmt.Sprintf("starting the egress proxy of sandbox %q", name), err)
	}
	expired, stop := expiry(proxyReadyWait)
	defer stop()
	for i := 0; ; i++ {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		if late := expired(); i%20 == 19 || late {
			if info, err := m.Engine.ContainerInspect(ctx, info.ID); err == nil && info.State != nil && !info.State.Running {
				return m.proxyFailure(ctx, info.ID, fmt.Errorf("sandbox %q: its egress proxy exited (code %d) before it listened", name, info.State.ExitCode))
			}
			if late {
				return m.proxyFailure(ctx, info.ID, fmt.Errorf("sandbox %q: its egress proxy did not listen within %s", name, proxyReadyWait))
			}
		}
		if err := sleepCtx(ctx, 25*time.Millisecond); err != nil {
			return err
		}
	}
}

// proxyFailure is err with the end of the log of proxy id, read now: a failed create
// removes the proxy, so a hint to read its log later would name a container that is gone.
func (m *Manager) proxyFailure(ctx context.Context, id string, err error) error {
	tail := m.logTail(context.WithoutCancel(ctx), id, 5)
	if len(tail) == 0 {
		return errs.Failure(err, "its log is empty; run sbx doctor, and sbx --debug to see the engine's calls")
	}
	return errs.Failure(fmt.Errorf("%w; its log ends:\n  %s", err, strings.Join(tail, "\n  ")), "the proxy's log above says why")
}

// stopProxy stops sandbox name's proxy, if it has one running.
func (m *Manager) stopProxy(ctx context.Context, name string) error {
	err := m.Engine.ContainerStop(ctx, ProxyName(name), container.StopOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return errs.Engine(fmt.Sprintf("stopping the egress proxy of sandbox %q", name), err)
	}
	return nil
}

// removeProxy removes sandbox name's proxy container, when sbx made it.
func (m *Manager) removeProxy(ctx context.Context, name string) error {
	info, err := m.Engine.ContainerInspect(ctx, ProxyName(name))
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return errs.Engine(fmt.Sprintf("inspecting the egress proxy of sandbox %q", name), err)
	}
	if info.Config == nil || info.Config.Labels[LabelRole] != roleProxy || info.Config.Labels[LabelName] != name {
		return &NotManagedError{Container: ProxyName(name)}
	}
	if err := m.Engine.ContainerRemove(ctx, info.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return errs.Engine(fmt.Sprintf("removing the egress proxy of sandbox %q", name), err)
	}
	return nil
}

// removeEgress removes sandbox name's proxy and egress network, and with forget its egress
// directory (rules and log).
func (m *Manager) removeEgress(ctx context.Context, name string, forget bool) error {
	if err := m.removeProxy(ctx, name); err != nil {
		return err
	}
	n, err := m.Engine.NetworkInspect(ctx, EgressNetworkName(name), network.InspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
	case err != nil:
		return errs.Engine(fmt.Sprintf("inspecting the egress network of sandbox %q", name), err)
	case n.Labels[LabelManaged] == "true" && n.Labels[LabelName] == name:
		if err := m.Engine.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			return errs.Engine(fmt.Sprintf("removing the egress network of sandbox %q", name), err)
		}
	}
	if !forget || m.State == nil {
		return nil
	}
	if err := m.State.remove(m.State.DirIn(AreaEgress, name)); err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q was removed, but not its egress directory: %w", name, err),
			"sbx removes nothing outside its state directory; look at that path, and remove it yourself if it should go")
	}
	return nil
}

// orphanProxies lists the proxy containers of sandboxes that no longer exist.
func (m *Manager) orphanProxies(ctx context.Context, alive map[string]bool, filter Filter) ([]string, error) {
	list, err := m.Engine.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelRole+"="+roleProxy))})
	if err != nil {
		return nil, errs.Engine("listing egress proxies", err)
	}
	var out []string
	for _, c := range list {
		name := c.Labels[LabelName]
		if c.Labels[LabelManaged] == "true" && c.Labels[LabelRole] == roleProxy && config.ValidName(name) == nil && !alive[name] &&
			slices.Contains(c.Names, "/"+ProxyName(name)) && filter.Match(&Sandbox{Name: name, Labels: c.Labels}) {
			out = append(out, ProxyName(name))
		}
	}
	return out, nil
}
