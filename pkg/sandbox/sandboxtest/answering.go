package sandboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Flood is more output than any cap sbx keeps, and more than sbx's own work (some 17 MiB under
// the race detector, to fill a 4 MiB buffer and fail) could hide: the tests of what sbx reads
// back from a sandbox stream it through Answering and check that sbx's heap never held it.
const Flood = 256 << 20

// Box is a running sandbox for Answering's manager.
var Box = &sandbox.Sandbox{Name: "box", ID: "c1", Status: "running"}

// Answering is a manager on a fake engine whose execs answer with answer(cmd), and whose
// sandbox still runs when sbx asks after a failed check.
func Answering(t *testing.T, answer func(cmd []string) enginetest.Answer) *sandbox.Manager {
	fake := &enginetest.FakeEngine{T: t, ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: &container.State{Running: true}}}, nil
	}}
	fake.AnswerExecs(answer)
	return &sandbox.Manager{Engine: fake, Now: time.Now}
}
