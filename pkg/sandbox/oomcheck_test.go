package sandbox

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

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
