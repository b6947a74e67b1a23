package enginetest

import (
	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"
)

// NetworkSettings reports published ports the way the engine does. Ports is promoted from a
// struct the client marks deprecated, so it is set through the field, not the type.
func NetworkSettings(ports nat.PortMap) *container.NetworkSettings {
	ns := &container.NetworkSettings{}
	ns.Ports = ports
	return ns
}
