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

// A leftover agent directory goes, with what a sandbox left in it, unless its sandbox exists
// again or a start holds its lock.
func TestRemoveOrphanAgentDirs(t *testing.T) {
	exists := map[string]bool{"sbx-back": true}
	fake := &enginetest.FakeEngine{ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) {
		if exists[id] {
			return container.InspectResponse{}, nil
		}
		return container.InspectResponse{}, errNotFound
	}}
	m := fakeManager(t, fake)
	agentDirs := filepath.Join(m.State.Dir, "agent")
	for _, d := range []string{"gone/sub", "back", "starting"} {
		if err := os.MkdirAll(filepath.Join(agentDirs, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(agentDirs, "gone", "sub"), 0o500); err != nil {
		t.Fatal(err)
	}
	held, err := os.OpenFile(filepath.Join(agentDirs, ".starting.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveOrphans(context.Background(), sandbox.Orphans{AgentDirs: []string{"gone", "back", "starting"}}); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]bool{"gone": false, ".gone.lock": false, "back": true, "starting": true} {
		if _, err := os.Lstat(filepath.Join(agentDirs, d)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", d, err == nil, want)
		}
	}
}
