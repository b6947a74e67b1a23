package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// A sweep removes what a dead sbx left under its record, whether or not the container was
// made, and passes over the records of live ones and files that are no records.
func TestSweepThrowawaysTakesOnlyAbandonedOnes(t *testing.T) {
	if !flock.Excludes {
		t.Skip("flock excludes nothing on this platform, so sweeps do nothing")
	}
	var removedVolumes []string
	eng := &enginetest.FakeEngine{T: t,
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, cerrdefs.ErrNotFound
		},
		NetworkInspectFn: func(context.Context, string, network.InspectOptions) (network.Inspect, error) {
			return network.Inspect{}, cerrdefs.ErrNotFound
		},
		VolumeRemoveFn: func(_ context.Context, id string, _ bool) error {
			removedVolumes = append(removedVolumes, id)
			return nil
		},
	}
	st := &StateStore{Dir: t.TempDir()}
	m := &Manager{Engine: eng, State: st}

	live, err := st.ClaimThrowaway()
	if err != nil {
		t.Fatal(err)
	}
	defer live.lock.Close()
	dead, err := st.ClaimThrowaway()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(st.path(dead.Name), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	dead.lock.Close() // what the kernel does when its sbx dies
	notRecord := filepath.Join(st.Dir, throwawayDir, "other")
	if err := os.WriteFile(notRecord, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	removed, err := m.SweepThrowaways(context.Background())
	if err != nil || !slices.Equal(removed, []string{dead.Name}) {
		t.Fatalf("sweep removed %v (%v), want only %s", removed, err, dead.Name)
	}
	if !slices.Equal(removedVolumes, []string{VolumeName(dead.Name), OverlayVolumeName(dead.Name)}) {
		t.Errorf("volumes removed: %v", removedVolumes)
	}
	for _, p := range []string{dead.path, st.path(dead.Name)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", p, err)
		}
	}
	for _, p := range []string{live.path, notRecord} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s went: %v", p, err)
		}
	}
	if removed, err := m.SweepThrowaways(context.Background()); err != nil || len(removed) != 0 {
		t.Errorf("a second sweep removed %v (%v)", removed, err)
	}
}

// Nothing made under a claim: dropping it leaves no record, and no claim reuses a name.
func TestClaimThrowawayNamesAreFreshAndDropped(t *testing.T) {
	st := &StateStore{Dir: t.TempDir()}
	seen := map[string]bool{}
	for range 20 {
		c, err := st.ClaimThrowaway()
		if err != nil {
			t.Fatal(err)
		}
		if seen[c.Name] || len(c.Name) != len(ThrowawayPrefix)+10 {
			t.Fatalf("name %q (seen before: %v)", c.Name, seen[c.Name])
		}
		seen[c.Name] = true
		if err := c.Drop(); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(st.Dir, throwawayDir))
	if err != nil || len(entries) != 0 {
		t.Errorf("left in the record directory: %v (%v)", entries, err)
	}
}
