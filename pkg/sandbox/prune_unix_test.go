//go:build unix

package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// A leftover agent or CA directory goes, with what a sandbox left in it, unless its sandbox
// exists again or a start (or, for the CA directory, a create) holds its lock.
func TestRemoveOrphanDirs(t *testing.T) {
	for sub, orphans := range map[string]func([]string) sandbox.Orphans{
		"agent": func(n []string) sandbox.Orphans { return sandbox.Orphans{AgentDirs: n} },
		"ca":    func(n []string) sandbox.Orphans { return sandbox.Orphans{CADirs: n} },
	} {
		t.Run(sub, func(t *testing.T) {
			exists := map[string]bool{"sbx-back": true}
			fake := &enginetest.FakeEngine{ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) {
				if exists[id] {
					return container.InspectResponse{}, nil
				}
				return container.InspectResponse{}, errNotFound
			}}
			m := fakeManager(t, fake)
			dirs := filepath.Join(m.State.Dir, sub)
			for _, d := range []string{"gone/sub", "back", "starting"} {
				if err := os.MkdirAll(filepath.Join(dirs, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(filepath.Join(dirs, "gone", "sub"), 0o500); err != nil {
				t.Fatal(err)
			}
			held, err := os.OpenFile(filepath.Join(dirs, ".starting.lock"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			if err := m.RemoveOrphans(context.Background(), orphans([]string{"gone", "back", "starting"})); err != nil {
				t.Fatal(err)
			}
			for d, want := range map[string]bool{"gone": false, ".gone.lock": false, "back": true, "starting": true} {
				if _, err := os.Lstat(filepath.Join(dirs, d)); (err == nil) != want {
					t.Errorf("%s: exists %v, want %v", d, err == nil, want)
				}
			}
		})
	}
}
