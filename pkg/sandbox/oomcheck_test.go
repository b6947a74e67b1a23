package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// The OOM check after a command killed through the engine's exec is bounded: an engine that
// never answers it (a fork bomb holding the sandbox's pids) leaves the command's 137 as it is.
func TestOOMCheckIsBounded(t *testing.T) {
	defer func(d time.Duration) { oomCheckWait = d }(oomCheckWait)
	oomCheckWait = 200 * time.Millisecond
	never, hold := io.Pipe()
	t.Cleanup(func() { hold.Close() })
	fake := &enginetest.FakeEngine{T: t, ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: &container.State{Running: true}}}, nil
	}}
	fake.AnswerExecs(func(cmd []string) enginetest.Answer {
		if slices.Contains(cmd, "sbx-helper") {
			return enginetest.Answer{Stdout: never}
		}
		return enginetest.Answer{Code: 137}
	})
	m := &Manager{Engine: fake, Now: time.Now}
	done := make(chan struct{})
	var res *ExecResult
	var err error
	go func() {
		defer close(done)
		res, err = m.Exec(context.Background(), &Sandbox{Name: "box", ID: "c1", Status: "running"}, ExecOptions{Cmd: []string{"true"}})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // only fails an Exec that waits on
		t.Fatal("Exec still waits on the OOM check after a minute")
	}
	if err != nil || res.ExitCode != 137 || res.OOMKilled {
		t.Errorf("want exit 137, no OOM: %+v %v", res, err)
	}
}

// Under gVisor the engine keeps the stream of an exec open for minutes after the sandbox
// stopped under it; the watch on the sandbox ends it, and an OOM kill of the whole sandbox is
// the command's result (137, OOM, the sandbox with it), while any other stop is an error. The
// engine's OOM event counts when its state lost the flag (Docker 20.10, 1 run in 10 here).
func TestGVisorSandboxStopEndsTheExec(t *testing.T) {
	for _, c := range []struct {
		flag, event bool
	}{{true, false}, {false, true}, {false, false}} {
		oom := c.flag || c.event
		t.Run(fmt.Sprintf("flag=%v,event=%v", c.flag, c.event), func(t *testing.T) {
			never, hold := io.Pipe()
			t.Cleanup(func() { hold.Close() })
			var stopped atomic.Bool
			fake := &enginetest.FakeEngine{T: t, ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
				st := &container.State{Running: !stopped.Load(), Status: "running"}
				if stopped.Load() {
					st.Status, st.OOMKilled, st.StartedAt = "exited", c.flag, "2026-12-06T18:00:00.5Z"
				}
				return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: st}}, nil
			}}
			fake.EventsFn = func(_ context.Context, o events.ListOptions) (<-chan events.Message, <-chan error) {
				if o.Since != "2026-12-06T18:00:00.5Z" || o.Until == "" || !o.Filters.ExactMatch("container", "c1") || !o.Filters.ExactMatch("event", "oom") {
					t.Errorf("Events(%+v): want this run's OOM events of c1", o)
				}
				msgs, errc := make(chan events.Message, 1), make(chan error, 1)
				if c.event {
					msgs <- events.Message{Type: events.ContainerEventType, Action: events.ActionOOM, Actor: events.Actor{ID: "c1"}}
				} else {
					errc <- io.EOF
				}
				return msgs, errc
			}
			fake.AnswerExecs(func([]string) enginetest.Answer { return enginetest.Answer{Stdout: never} })
			fake.ContainerWaitFn = func(ctx context.Context, id string, cond container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
				if id != "c1" || cond != container.WaitConditionNotRunning {
					t.Errorf("ContainerWait(%q, %q)", id, cond)
				}
				waitc, errc := make(chan container.WaitResponse, 1), make(chan error, 1)
				// The sandbox stops as soon as the command has started.
				stopped.Store(true)
				waitc <- container.WaitResponse{StatusCode: 137}
				return waitc, errc
			}
			m := &Manager{Engine: fake, Now: time.Now}
			sb := &Sandbox{Name: "box", ID: "c1", Status: "running", Labels: map[string]string{LabelConfig: `{"isolation":"gvisor"}`}}
			done := make(chan struct{})
			var res *ExecResult
			var err error
			go func() {
				defer close(done)
				res, err = m.Exec(context.Background(), sb, ExecOptions{Cmd: []string{"true"}})
			}()
			select {
			case <-done:
			case <-time.After(time.Minute): // only fails an Exec that waits on
				t.Fatal("Exec still waits on a stream the engine keeps open after a minute")
			}
			switch {
			case oom && (err != nil || res.ExitCode != 137 || !res.OOMKilled || !res.SandboxKilled):
				t.Errorf("want an OOM kill of the sandbox: %+v %v", res, err)
			case !oom && (err == nil || !strings.Contains(err.Error(), "stopped while the command ran")):
				t.Errorf("want an error saying the sandbox stopped: %+v %v", res, err)
			}
		})
	}
}

// A sandbox that stopped under a command was killed for memory when the engine saw an OOM in
// this run and, under runc, its main process died of a SIGKILL (137): the kernel at times
// kills the agent after the command. Any other stop is the sandbox stopping.
func TestSandboxGoneForMemory(t *testing.T) {
	for _, c := range []struct {
		gvisor bool
		exit   int
		oom    bool
		want   bool
	}{
		{gvisor: false, exit: 137, oom: true, want: true},
		{gvisor: false, exit: 137, oom: false, want: false},
		{gvisor: false, exit: 0, oom: true, want: false}, // an earlier command's kill
		{gvisor: true, exit: 0, oom: true, want: true},
		{gvisor: true, exit: 137, oom: false, want: false},
	} {
		t.Run(fmt.Sprintf("gvisor=%v,exit=%d,oom=%v", c.gvisor, c.exit, c.oom), func(t *testing.T) {
			fake := &enginetest.FakeEngine{T: t, ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
				st := &container.State{Status: "exited", ExitCode: c.exit, OOMKilled: c.oom, StartedAt: "2026-12-06T18:00:00.5Z"}
				return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: st}}, nil
			}}
			fake.EventsFn = func(context.Context, events.ListOptions) (<-chan events.Message, <-chan error) {
				errc := make(chan error, 1)
				errc <- io.EOF
				return nil, errc
			}
			sb := &Sandbox{Name: "box", ID: "c1", Labels: map[string]string{}}
			if c.gvisor {
				sb.Labels[LabelConfig] = `{"isolation":"gvisor"}`
			}
			m := &Manager{Engine: fake, Now: time.Now}
			gone := m.sandboxGone(context.Background(), sb)
			switch {
			case gone == nil:
				t.Fatal("a stopped sandbox is not gone")
			case errors.Is(gone, errSandboxOOM) != c.want:
				t.Errorf("gone: %v, want killed for memory: %v", gone, c.want)
			case !c.want && !strings.Contains(gone.Error(), "stopped while the command ran (status exited)"):
				t.Errorf("gone: %v", gone)
			}
		})
	}
}
