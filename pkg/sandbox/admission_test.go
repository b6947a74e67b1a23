package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestEvictionOrderIsLeastRecentlyUsedFirst(t *testing.T) {
	used := map[string]time.Time{"a": clock.Add(-time.Hour), "c": clock.Add(-5 * time.Minute), "d": clock.Add(-time.Hour)}
	list := []*sandbox.Sandbox{
		{Name: "c", CreatedAt: clock.Add(-48 * time.Hour)},
		{Name: "d", CreatedAt: clock.Add(-48 * time.Hour)},
		{Name: "a", CreatedAt: clock.Add(-48 * time.Hour)},
		{Name: "b", CreatedAt: clock.Add(-2 * time.Hour)}, // never used: its creation counts
	}
	got := sandbox.EvictionOrder(list, func(n string) (time.Time, bool) { t, ok := used[n]; return t, ok })
	var names []string
	for _, sb := range got {
		names = append(names, sb.Name)
	}
	if strings.Join(names, ",") != "b,a,d,c" {
		t.Errorf("order %v, want b,a,d,c", names)
	}
	if list[0].Name != "c" {
		t.Error("EvictionOrder reordered its input")
	}
}

// capEngine is a fake engine with running sandboxes s1..s3 (least recently used first) and
// a stopped target, recording what is paused, stopped and started.
type capEngine struct {
	*enginetest.FakeEngine
	paused, stopped, started []string
}

func newCapEngine(t *testing.T, in sandbox.SpecInput, targetStatus container.ContainerState, extra ...string) (*capEngine, *sandbox.Manager) {
	e := &capEngine{FakeEngine: &enginetest.FakeEngine{}}
	target := inspectOf(t, in, targetStatus)
	e.ContainerInspectFn = func(_ context.Context, id string) (container.InspectResponse, error) {
		if id == sandbox.ContainerName(in.Name) || id == target.ID {
			return target, nil
		}
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: id, State: &container.State{Status: container.StateRunning}}}, nil
	}
	e.ContainerListFn = func(context.Context, container.ListOptions) ([]container.Summary, error) {
		var out []container.Summary
		for _, n := range append([]string{"s1", "s2", "s3"}, extra...) {
			out = append(out, container.Summary{ID: "id-" + n, Names: []string{"/" + sandbox.ContainerName(n)}, State: container.StateRunning,
				Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: n}})
		}
		return out, nil
	}
	e.ContainerPauseFn = func(_ context.Context, id string) error { e.paused = append(e.paused, id); return nil }
	e.ContainerStopFn = func(_ context.Context, id string, _ container.StopOptions) error {
		e.stopped = append(e.stopped, id)
		return nil
	}
	e.ContainerStartFn = func(_ context.Context, id string, _ container.StartOptions) error {
		e.started = append(e.started, id)
		target.State.Status = container.StateRunning
		return nil
	}
	e.ContainerUnpauseFn = func(_ context.Context, id string) error {
		e.started = append(e.started, id)
		target.State.Status = container.StateRunning
		return nil
	}
	m := fakeManager(t, e.FakeEngine)
	for i, n := range []string{"s1", "s2", "s3"} {
		if err := m.State.SetLastUsed(n, clock.Add(time.Duration(i-10)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	return e, m
}

func TestEnsureEvictsTheLeastRecentlyUsedIdleSandbox(t *testing.T) {
	in := specInput()
	in.Config.MaxRunning = 3
	// s0 runs too, but this user's sbx never used it (no state file): another user's.
	e, m := newCapEngine(t, in, container.StateExited, "s0")
	var progress bytes.Buffer
	m.Progress = &progress
	// s1, the least recently used, has a command in flight.
	busy, err := m.Lease(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Release()

	res, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Lease.Release()
	if strings.Join(e.paused, ",") != "id-s2" || len(e.stopped) != 0 || strings.Join(e.started, ",") != "c1" {
		t.Errorf("paused %v stopped %v started %v; want s2 paused and the target started", e.paused, e.stopped, e.started)
	}
	if !strings.Contains(progress.String(), `maxRunning 3: paused sandbox "s2" (least recently used, idle 9m) to make room for "app-123456"`) {
		t.Errorf("progress %q", progress.String())
	}
	if last, ok := m.State.LastUsed(in.Name); !ok || !last.Equal(clock) {
		t.Errorf("the started sandbox's use was not recorded: %v %v", last, ok)
	}
}

func TestEnsureEvictsByStopping(t *testing.T) {
	in := specInput()
	in.Config.MaxRunning, in.Config.Evict = 2, config.EvictStop
	e, m := newCapEngine(t, in, container.StatePaused)
	res, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res.Lease.Release()
	if strings.Join(e.stopped, ",") != "id-s1,id-s2" || len(e.paused) != 0 || strings.Join(e.started, ",") != "c1" {
		t.Errorf("stopped %v paused %v resumed %v", e.stopped, e.paused, e.started)
	}
}

func TestEnsureResumesAPausedSandbox(t *testing.T) {
	in := specInput() // no cap: nothing is listed or evicted
	e, m := newCapEngine(t, in, container.StatePaused)
	e.ContainerListFn = nil
	var progress bytes.Buffer
	m.Progress = &progress
	res, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res.Lease.Release()
	if res.Sandbox.Status != "running" || strings.Join(e.started, ",") != "c1" || !strings.Contains(progress.String(), `sandbox "app-123456" is paused; resuming it`) {
		t.Errorf("%+v resumed %v progress %q", res.Sandbox, e.started, progress.String())
	}
}

func TestPauseAndResume(t *testing.T) {
	in := specInput()
	e, m := newCapEngine(t, in, container.StateRunning)
	ctx := context.Background()
	if already, err := m.Pause(ctx, in.Name); err != nil || already || strings.Join(e.paused, ",") != "c1" {
		t.Fatalf("pause: %v %v %v", already, err, e.paused)
	}
	if already, err := m.Resume(ctx, in.Name, in.Config); err != nil || !already {
		t.Errorf("resume of a running sandbox: %v %v", already, err)
	}

	_, m = newCapEngine(t, in, container.StateExited)
	if _, err := m.Pause(ctx, in.Name); errs.ExitCode(err) != errs.CodeError || !strings.Contains(err.Error(), "not running") {
		t.Errorf("pause of a stopped sandbox: %v", err)
	}
	_, err := m.Resume(ctx, in.Name, in.Config)
	var np *sandbox.NotPausedError
	if !errors.As(err, &np) || !strings.Contains(errs.Hint(err), "sbx exec") {
		t.Errorf("resume of a stopped sandbox: %v", err)
	}
}
