package prune

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// pruneEnv has two sandboxes of this user's: old, unused for two days (past the default
// idle limit), and new, used a minute ago. removeErr is what removing a container answers.
func pruneEnv(t *testing.T, removeErr error) (*cmdtest.Env, *[]string) {
	e := cmdtest.NewEnv(t, &enginetest.FakeEngine{})
	state := &sandbox.StateStore{Dir: cmdutil.StateDir(e.F), Now: e.F.Now}
	var list []container.Summary
	for name, idle := range map[string]time.Duration{"old": 48 * time.Hour, "new": time.Minute} {
		list = append(list, cmdtest.Summary(e.Sandbox(t, name, container.StateRunning, nil)))
		if err := state.SetLastUsed(name, e.F.Now().Add(-idle)); err != nil {
			t.Fatal(err)
		}
	}
	var removed []string
	e.Fake.ContainerListFn = func(context.Context, container.ListOptions) ([]container.Summary, error) { return list, nil }
	e.Fake.VolumeListFn = func(context.Context, volume.ListOptions) (volume.ListResponse, error) {
		return volume.ListResponse{}, nil
	}
	e.Fake.NetworkListFn = func(context.Context, network.ListOptions) ([]network.Summary, error) { return nil, nil }
	e.Fake.ContainerRemoveFn = func(_ context.Context, id string, _ container.RemoveOptions) error {
		removed = append(removed, id)
		return removeErr
	}
	return e, &removed
}

func TestPruneRun(t *testing.T) {
	e, removed := pruneEnv(t, nil)
	if err := pruneRun(context.Background(), &PruneOptions{IO: e.IO, Factory: e.F, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if e.Out.String() != "would remove old (idle 2d > 24h)\n" || len(*removed) != 0 {
		t.Errorf("dry run: stdout %q, removed %v", e.Out, *removed)
	}

	e.Out.Reset()
	if err := pruneRun(context.Background(), &PruneOptions{IO: e.IO, Factory: e.F, Force: true}); err != nil {
		t.Fatal(err)
	}
	if e.Out.String() != "removed old (idle 2d > 24h)\n" || strings.Join(*removed, ",") != "id-old" {
		t.Errorf("stdout %q, removed %v", e.Out, *removed)
	}
}

// A removal the engine refuses is reported, in the JSON too, and fails the command with exit 1.
func TestPruneRunRemovalFails(t *testing.T) {
	e, _ := pruneEnv(t, errors.New("removal of container id-old is already in progress"))
	err := pruneRun(context.Background(), &PruneOptions{IO: e.IO, Factory: e.F, Force: true, JSON: true})
	if err == nil || err.Error() != `removing "old": removing sandbox "old": removal of container id-old is already in progress` || errs.ExitCode(err) != errs.CodeError {
		t.Errorf("err %v (exit %d)", err, errs.ExitCode(err))
	}
	var rep Report
	if err := json.Unmarshal(e.Out.Bytes(), &rep); err != nil || len(rep.Removed) != 0 || len(rep.Failed) != 1 || rep.Failed[0].Name != "old" || rep.IdleLimit != "24h" {
		t.Errorf("%v: %s", err, e.Out)
	}
}
