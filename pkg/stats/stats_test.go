package stats_test

import (
	"math"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/stats"
)

func TestStatsFrom(t *testing.T) {
	sb := &sandbox.Sandbox{Name: "web", ID: "c1", Status: "running"}
	var s container.StatsResponse
	s.CPUStats.CPUUsage.TotalUsage, s.CPUStats.SystemUsage, s.CPUStats.OnlineCPUs = 1_500_000_000, 20_000_000_000, 2
	s.PreCPUStats.CPUUsage.TotalUsage, s.PreCPUStats.SystemUsage = 1_000_000_000, 18_000_000_000
	s.MemoryStats = container.MemoryStats{Usage: 300 << 20, Limit: 1 << 30, Stats: map[string]uint64{"total_inactive_file": 44 << 20}}
	s.PidsStats = container.PidsStats{Current: 12, Limit: 256}
	s.Networks = map[string]container.NetworkStats{"eth0": {RxBytes: 100, TxBytes: 50}, "eth1": {RxBytes: 1, TxBytes: 2}}
	s.BlkioStats.IoServiceBytesRecursive = []container.BlkioStatEntry{{Op: "Read", Value: 4096}, {Op: "Write", Value: 8192}, {Op: "read", Value: 1}, {Op: "Total", Value: 99999}}
	got := stats.From(sb, &s)
	// 0.5 s of CPU in 2 s of the host's 2 CPUs' time: half of one CPU.
	if math.Abs(got.CPUPercent-50) > 1e-9 {
		t.Errorf("cpu %v%%", got.CPUPercent)
	}
	if got.MemoryUsage != 256<<20 || got.MemoryLimit != 1<<30 || math.Abs(got.MemoryPercent-25) > 1e-9 {
		t.Errorf("memory %d / %d (%v%%)", got.MemoryUsage, got.MemoryLimit, got.MemoryPercent)
	}
	if got.PIDs != 12 || got.PIDsLimit != 256 || got.NetRx != 101 || got.NetTx != 52 || got.BlockRead != 4097 || got.BlockWrite != 8192 {
		t.Errorf("%+v", got)
	}
	if got.Name != "web" || got.ID != "c1" || got.Status != "running" {
		t.Errorf("%+v", got)
	}

	// A one-shot sample has no previous one; cgroup v2 names the page cache inactive_file.
	var one container.StatsResponse
	one.MemoryStats = container.MemoryStats{Usage: 10 << 20, Stats: map[string]uint64{"inactive_file": 4 << 20}}
	got = stats.From(sb, &one)
	if got.CPUPercent != -1 || got.MemoryUsage != 6<<20 || got.MemoryPercent != 0 {
		t.Errorf("one-shot %+v", got)
	}
}
