package sandbox

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/mount"

	"github.com/sbx-sandbox/sbx/pkg/engine"
)

// On Podman, which drops the options of a volume declared in a mount, the proxy's
// directory is a bind with the same mount options; other mounts stay; Docker keeps the volume.
func TestPodmanGetsHostDirectoriesAsBinds(t *testing.T) {
	for _, product := range []string{engine.ProductDocker, engine.ProductPodman} {
		m := &Manager{engineFacts: &engineFacts{kind: engine.Kind{Product: product}}}
		_, host, _ := ProxySpec(ProxyInput{Name: "app", Binary: "/usr/bin/sbx", Dir: "/state/egress/app", Subnet: netip.MustParsePrefix("10.213.0.0/24")})
		before := slices.Clone(host.Mounts)
		if err := m.engineHostDirs(context.Background(), host); err != nil {
			t.Fatal(err)
		}
		if product == engine.ProductDocker {
			if !slices.EqualFunc(before, host.Mounts, func(a, b mount.Mount) bool { return a.Target == b.Target && a.Type == b.Type }) || len(host.Binds) != 0 {
				t.Errorf("Docker: mounts changed: %+v, binds %v", host.Mounts, host.Binds)
			}
			continue
		}
		if want := []string{"/state/egress/app:" + proxyDir + ":rw,nosuid,nodev,noexec"}; !slices.Equal(host.Binds, want) {
			t.Errorf("Podman: binds %v, want %v", host.Binds, want)
		}
		if len(host.Mounts) != len(before)-1 || slices.ContainsFunc(host.Mounts, func(mt mount.Mount) bool { return mt.Target == proxyDir }) {
			t.Errorf("Podman: mounts %+v, want all but the directory's", host.Mounts)
		}
	}
}
