package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestCgroupLimitsNotHeld(t *testing.T) {
	pids := int64(256)
	host := &container.HostConfig{Resources: container.Resources{Memory: 1 << 30, NanoCPUs: 2e9, PidsLimit: &pids}}
	for _, tc := range []struct {
		answer string
		want   []string
	}{
		{"memory=1073741824\npids=256\ncpu=200000/100000\n", nil},
		{"memory=536870912\npids=100\ncpu=50000/100000\n", nil}, // tighter is the engine's to set
		{"", nil}, // nothing readable (gVisor): the engine's word stands
		{"memory=max\npids=max\ncpu=max/100000\n", []string{
			"memory (asked 1073741824 bytes, the cgroup has none)", "pids (asked 256, the cgroup has none)", "cpus (asked 2, the cgroup has none)"}},
		{"memory=2147483648\npids=1024\ncpu=400000/100000\n", []string{
			"memory (asked 1073741824 bytes, the cgroup has 2147483648)", "pids (asked 256, the cgroup has 1024)", "cpus (asked 2, the cgroup has 4)"}},
		{"cpu=100001/50000\n", nil}, // the engine's rounding
		{"cpu=100002/50000\n", []string{"cpus (asked 2, the cgroup has 2.00004)"}},
	} {
		got, err := agent.ParseLimits(tc.answer)
		if err != nil {
			t.Fatalf("%q: %v", tc.answer, err)
		}
		if missing := cgroupLimitsNotHeld(host, got); strings.Join(missing, "; ") != strings.Join(tc.want, "; ") {
			t.Errorf("%q: %q, want %q", tc.answer, missing, tc.want)
		}
	}
	// A sandbox created without a limit has none to hold.
	if missing := cgroupLimitsNotHeld(&container.HostConfig{}, agent.CgroupLimits{Memory: -1, Pids: -1, CPUQuota: -1, CPUPeriod: 1,
		Known: map[string]bool{"memory": true, "pids": true, "cpu": true}}); len(missing) != 0 {
		t.Errorf("no limits asked: %q", missing)
	}
}

// fakeLimitsAgent answers one limits query in dir as an agent whose cgroup says answer.
func fakeLimitsAgent(t *testing.T, dir, answer string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	frame := func(typ agent.FrameType, body string) []byte {
		b := []byte{byte(typ), 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
		return append(b, body...)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(frame(agent.FrameHello, agent.Version()))
		q := make([]byte, 5)
		if _, err := io.ReadFull(c, q); err != nil || agent.FrameType(q[0]) != agent.FrameLimits {
			return
		}
		_, _ = c.Write(frame(agent.FrameLimits, answer))
	}()
}

// A started sandbox whose cgroup lacks a limit it was created with is stopped, with exit 125
// naming the limit, unless the user's config accepted that at create: then a warning.
func TestStartStopsASandboxWhoseCgroupLacksItsLimits(t *testing.T) {
	pids := int64(256)
	for _, accepted := range []bool{false, true} {
		state := &StateStore{Dir: t.TempDir()}
		stopped := 0
		fake := &enginetest.FakeEngine{
			ContainerInspectFn: func(context.Context, string) (container.InspectResponse, error) {
				return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "c1",
					HostConfig: &container.HostConfig{Resources: container.Resources{Memory: 1 << 30, PidsLimit: &pids}}}}, nil
			},
			ContainerStopFn: func(context.Context, string, container.StopOptions) error { stopped++; return nil },
		}
		var warn bytes.Buffer
		m := &Manager{Engine: fake, State: state, Warn: &warn,
			engineFacts: &engineFacts{kind: engine.Kind{Product: engine.ProductDocker, Rootless: true}}}
		sb := &Sandbox{Name: "app", Key: "app", ID: "c1", Labels: map[string]string{LabelAgent: agent.Version()}}
		if accepted {
			sb.Labels[LabelUnenforcedLimits] = "accepted"
		}
		fakeLimitsAgent(t, state.DirIn(AreaAgent, "app"), "memory=max\npids=256\n")
		err := m.checkCgroupLimits(context.Background(), sb, nil)
		if accepted {
			if err != nil || stopped != 0 || !strings.Contains(warn.String(), "memory (asked 1073741824 bytes, the cgroup has none)") {
				t.Errorf("accepted: err %v, %d stops, warning %q", err, stopped, warn.String())
			}
			continue
		}
		var coded interface{ ExitCode() int }
		if !errors.As(err, &coded) || coded.ExitCode() != errs.CodeFailure || stopped != 1 ||
			!strings.Contains(err.Error(), "rootless Docker did not apply the sandbox's limits, its agent read in its cgroup: memory (asked 1073741824 bytes, the cgroup has none)") ||
			strings.Contains(err.Error(), "pids") {
			t.Errorf("not accepted: err %v, %d stops", err, stopped)
		}
	}
}

// The agent's answer comes from inside the sandbox: one longer than the 256 bytes sbx reads,
// or garbled, is no answer (the engine's word stands, as under gVisor); it neither passes
// for limits held nor stops the sandbox.
func TestCgroupLimitsHostileAnswer(t *testing.T) {
	pids := int64(256)
	for _, answer := range []string{strings.Repeat("memory=1\n", 40), "memory=\x1b[2J\n", "memory=1\nmemory=1\n", "pids=-1\n"} {
		state := &StateStore{Dir: t.TempDir()}
		stopped := 0
		fake := &enginetest.FakeEngine{
			ContainerStopFn: func(context.Context, string, container.StopOptions) error { stopped++; return nil },
		}
		var debug bytes.Buffer
		m := &Manager{Engine: fake, State: state, Debug: &debug,
			engineFacts: &engineFacts{kind: engine.Kind{Product: engine.ProductDocker}}}
		sb := &Sandbox{Name: "app", Key: "app", ID: "c1", Labels: map[string]string{LabelAgent: agent.Version()}}
		fakeLimitsAgent(t, state.DirIn(AreaAgent, "app"), answer)
		host := &container.HostConfig{Resources: container.Resources{Memory: 1 << 30, PidsLimit: &pids}}
		if err := m.checkCgroupLimits(context.Background(), sb, host); err != nil || stopped != 0 ||
			!strings.Contains(debug.String(), "did not tell its cgroup's limits") || strings.Contains(debug.String(), "\x1b") {
			t.Errorf("%q: err %v, %d stops, debug %q", answer, err, stopped, debug.String())
		}
	}
}
