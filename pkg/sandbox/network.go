package sandbox

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/sbx-sandbox/sbx/pkg/config"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// A sandbox that asks for network bridge gets a bridge network of its own instead of the
// engine's shared default bridge: there every container could reach its listeners (a
// browser's DevTools port, a dev server) and it could reach theirs. The engine keeps
// user-defined bridges apart from each other and from the default bridge, so only the host
// (through the ports sbx publishes on 127.0.0.1) reaches what listens in the sandbox.

// NetworkName is the network of its own of sandbox NAME.
func NetworkName(name string) string { return "sbx-" + name + "-net" }

// ownsNetwork reports whether a sandbox on network gets a network of its own: bridge and
// default both name the engine's shared bridge, which sbx never uses.
func ownsNetwork(net string) bool { return net == "bridge" || net == "default" }

// networkMode is what the container joins for the configured network.
func networkMode(name, net string) string {
	if ownsNetwork(net) {
		return NetworkName(name)
	}
	return net
}

// NetworkSpec is the network of its own of the sandbox, carrying the container's labels; nil
// when it joins another network.
func (s *Spec) NetworkSpec() *network.CreateOptions {
	if s.Host == nil || string(s.Host.NetworkMode) != NetworkName(s.Name) {
		return nil
	}
	labels := map[string]string{}
	for _, k := range []string{LabelManaged, LabelName, LabelProject, LabelCreatedAt, LabelVersion} {
		labels[k] = s.Container.Labels[k]
	}
	for k, v := range s.Container.Labels {
		if !strings.HasPrefix(k, labelPrefix) {
			labels[k] = v
		}
	}
	return &network.CreateOptions{Driver: "bridge", Labels: labels,
		// The sandbox is alone on it; the option keeps it so should anything else be attached.
		Options: map[string]string{"com.docker.network.bridge.enable_icc": "false"}}
}

// ensureNetwork creates the sandbox's network of its own, or adopts the one a racing sbx (or
// an earlier create of the same sandbox) made. A network of that name that sbx did not make is
// refused, as a container would be.
func (m *Manager) ensureNetwork(ctx context.Context, name string, opts *network.CreateOptions) error {
	_, err := m.Engine.NetworkCreate(ctx, NetworkName(name), *opts)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsConflict(err) {
		return errs.Engine(fmt.Sprintf("creating the network of sandbox %q", name), err)
	}
	n, ierr := m.Engine.NetworkInspect(ctx, NetworkName(name), network.InspectOptions{})
	if ierr != nil {
		return errs.Engine(fmt.Sprintf("inspecting the network of sandbox %q", name), ierr)
	}
	if n.Labels[LabelManaged] != "true" || n.Labels[LabelName] != name {
		return &NotManagedError{Container: "network " + NetworkName(name)}
	}
	return nil
}

// removeNetwork removes the sandbox's network of its own, if it has one.
func (m *Manager) removeNetwork(ctx context.Context, name string) error {
	n, err := m.Engine.NetworkInspect(ctx, NetworkName(name), network.InspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return errs.Engine(fmt.Sprintf("inspecting the network of sandbox %q", name), err)
	}
	if n.Labels[LabelManaged] != "true" || n.Labels[LabelName] != name {
		return nil // not ours: never touched
	}
	if err := m.Engine.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
		return errs.Engine(fmt.Sprintf("removing the network of sandbox %q", name), err)
	}
	return nil
}

// orphanNetworks lists the networks of their own, and the egress networks (egress.go), of
// sandboxes that no longer exist.
func (m *Manager) orphanNetworks(ctx context.Context, alive map[string]bool, filter Filter) ([]string, error) {
	list, err := m.Engine.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelManaged+"=true"))})
	if err != nil {
		return nil, errs.Engine("listing networks", err)
	}
	var out []string
	for _, n := range list {
		name := n.Labels[LabelName]
		if n.Labels[LabelManaged] == "true" && (n.Name == NetworkName(name) || n.Name == EgressNetworkName(name)) && config.ValidName(name) == nil && !alive[name] &&
			filter.Match(&Sandbox{Name: name, Labels: n.Labels}) {
			out = append(out, n.Name)
		}
	}
	return out, nil
}
