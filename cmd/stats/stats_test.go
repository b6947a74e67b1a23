package stats

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/stats"
)

func TestNewCmdStatsFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdStats, []cmdtest.FlagCase[StatsOptions]{
		{Args: nil, Check: func(o *StatsOptions) bool { return len(o.Names) == 0 && !o.JSON && !o.NoStream }},
		{Args: []string{"web", "db", "--json", "--no-stream"}, Check: func(o *StatsOptions) bool {
			return strings.Join(o.Names, ",") == "web,db" && o.JSON && o.NoStream
		}},
		{Args: []string{"Bad Name"}, WantErr: "name"},
	})
}

func statsEngine(t *testing.T) *enginetest.FakeEngine {
	summary := func(name string, state container.ContainerState) container.Summary {
		return container.Summary{ID: "id-" + name, Names: []string{"/" + sandbox.ContainerName(name)}, State: state,
			Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: name}}
	}
	return &enginetest.FakeEngine{
		ContainerListFn: func(context.Context, container.ListOptions) ([]container.Summary, error) {
			return []container.Summary{summary("web", container.StateRunning), summary("old", container.StateExited), summary("db", container.StatePaused)}, nil
		},
		ContainerInspectFn: func(_ context.Context, id string) (container.InspectResponse, error) {
			name := strings.TrimPrefix(id, "sbx-")
			if name == "gone" {
				return container.InspectResponse{}, errNotFound{}
			}
			return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "id-" + name, State: &container.State{Status: container.StateRunning}},
				Config: &container.Config{Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelName: name}}}, nil
		},
		ContainerStatsFn: func(_ context.Context, id string, stream bool) (container.StatsResponseReader, error) {
			if stream {
				t.Errorf("a snapshot asked for a stream")
			}
			var s container.StatsResponse
			s.MemoryStats = container.MemoryStats{Usage: 100 << 20, Limit: 512 << 20}
			s.PidsStats = container.PidsStats{Current: 3, Limit: 256}
			s.CPUStats.CPUUsage.TotalUsage, s.CPUStats.SystemUsage, s.CPUStats.OnlineCPUs = 200, 1200, 1
			s.PreCPUStats.CPUUsage.TotalUsage, s.PreCPUStats.SystemUsage = 100, 1000
			body, _ := json.Marshal(s)
			return container.StatsResponseReader{Body: io.NopCloser(strings.NewReader(string(body)))}, nil
		},
	}
}

type errNotFound struct{}

func (errNotFound) Error() string { return "No such container" }
func (errNotFound) NotFound()     {}

func TestStatsSnapshot(t *testing.T) {
	e := cmdtest.NewEnv(t, statsEngine(t))
	out := e.Out
	if err := statsRun(context.Background(), &StatsOptions{IO: e.IO, Factory: e.F, JSON: true}); err != nil {
		t.Fatal(err)
	}
	var got []stats.Stats
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	// Without names: the running and paused sandboxes, by name.
	if len(got) != 2 || got[0].Name != "db" || got[1].Name != "web" || got[1].MemoryLimit != 512<<20 || got[1].CPUPercent != 50 || got[1].PIDsLimit != 256 {
		t.Errorf("%+v", got)
	}
	if !strings.Contains(out.String(), `"memoryLimitBytes": 536870912`) {
		t.Errorf("json field names:\n%s", out)
	}

	// Piped, without --json: a table, once; a name that does not exist fails, the rest show.
	out.Reset()
	err := statsRun(context.Background(), &StatsOptions{IO: e.IO, Factory: e.F, Names: []string{"web", "gone"}})
	if errs.ExitCode(err) != errs.CodeError || !strings.Contains(err.Error(), `"gone" not found`) {
		t.Errorf("missing name: %v", err)
	}
	want := "NAME\tSTATUS\tCPU %\tMEM USAGE / LIMIT\tMEM %\tPIDS\tNET I/O\tBLOCK I/O\nweb\trunning\t50.00%\t100MiB / 512MiB\t19.53%\t3 / 256\t0B / 0B\t0B / 0B\n"
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s\nstderr %s", out, want, e.Err)
	}
}
