package sandbox_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// An engine that cannot see this machine's files (a remote one) cannot mount an overlay of
// the project: the create is refused before anything is made, on the engine or in sbx's
// state. The fake has nothing but the lookup stubbed, so any other call fails the test.
func TestOverlayRefusedOnARemoteEngine(t *testing.T) {
	in := specInput()
	in.ProjectRoot = t.TempDir()
	in.Config.Workspace = config.WorkspaceOverlay
	in.Config.User = "1000:1000"
	fake := &enginetest.FakeEngine{
		ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
			return container.InspectResponse{}, errNotFound
		},
	}
	m := fakeManager(t, fake)
	m.HostPaths = false
	_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err == nil || !strings.Contains(err.Error(), "workspace overlay needs an engine that sees this machine's files") || !strings.Contains(errs.Hint(err), "workspace: ro or rw") {
		t.Fatalf("got %v (hint %q)", err, errs.Hint(err))
	}
	// Ensure's lease directory is every sandbox's; no layers were made.
	if _, err := os.Lstat(filepath.Join(m.State.Dir, "overlay")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the overlay's layers were made before the refusal: %v", err)
	}
}
