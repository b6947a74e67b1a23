// Package stats owns "sbx stats": a sandbox's CPU, memory, process and I/O use, computed from
// the engine's samples as docker stats does. It needs only the engine's stats calls (Engine)
// and a sandbox's name, id and status.
package stats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/sandbox"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Stats is a sandbox's resource use as the engine measures it. Sizes are bytes; the I/O
// counters are totals since the sandbox started.
type Stats struct {
	Name   string `json:"name"`
	ID     string `json:"id"`
	Status string `json:"status"`
	// CPUPercent is the share of one CPU used since the previous sample (200 means two CPUs);
	// -1 when there is no previous sample yet.
	CPUPercent    float64 `json:"cpuPercent"`
	MemoryUsage   uint64  `json:"memoryUsageBytes"` // without the page cache, as docker stats shows it
	MemoryLimit   uint64  `json:"memoryLimitBytes"`
	MemoryPercent float64 `json:"memoryPercent"`
	PIDs          uint64  `json:"pids"`
	PIDsLimit     uint64  `json:"pidsLimit"` // 0 when the engine reports none
	NetRx         uint64  `json:"netRxBytes"`
	NetTx         uint64  `json:"netTxBytes"`
	BlockRead     uint64  `json:"blockReadBytes"`
	BlockWrite    uint64  `json:"blockWriteBytes"`
}

// From computes a sandbox's Stats from one engine sample, as docker stats does. It is
// pure.
func From(sb *sandbox.Sandbox, s *container.StatsResponse) Stats {
	out := Stats{Name: sb.Name, ID: sb.ID, Status: sb.Status, CPUPercent: -1,
		MemoryLimit: s.MemoryStats.Limit, PIDs: s.PidsStats.Current, PIDsLimit: s.PidsStats.Limit}
	cpu, system := s.CPUStats.CPUUsage.TotalUsage, s.CPUStats.SystemUsage
	pcpu, psystem := s.PreCPUStats.CPUUsage.TotalUsage, s.PreCPUStats.SystemUsage
	if psystem > 0 && system > psystem && cpu >= pcpu {
		online := float64(s.CPUStats.OnlineCPUs)
		if online == 0 {
			online = float64(len(s.CPUStats.CPUUsage.PercpuUsage))
		}
		out.CPUPercent = float64(cpu-pcpu) / float64(system-psystem) * online * 100
	}
	// The page cache is reclaimable, so docker leaves it out: total_inactive_file on
	// cgroup v1, inactive_file on v2.
	out.MemoryUsage = s.MemoryStats.Usage
	cache, ok := s.MemoryStats.Stats["total_inactive_file"]
	if !ok {
		cache = s.MemoryStats.Stats["inactive_file"]
	}
	if cache < out.MemoryUsage {
		out.MemoryUsage -= cache
	}
	if out.MemoryLimit > 0 {
		out.MemoryPercent = float64(out.MemoryUsage) / float64(out.MemoryLimit) * 100
	}
	for _, n := range s.Networks {
		out.NetRx += n.RxBytes
		out.NetTx += n.TxBytes
	}
	for _, e := range s.BlkioStats.IoServiceBytesRecursive {
		switch strings.ToLower(e.Op) {
		case "read":
			out.BlockRead += e.Value
		case "write":
			out.BlockWrite += e.Value
		}
	}
	return out
}

// Engine is what sampling needs of the engine (engine.Engine has it).
type Engine interface {
	ContainerStats(ctx context.Context, containerID string, stream bool) (container.StatsResponseReader, error)
	ContainerStatsOneShot(ctx context.Context, containerID string) (container.StatsResponseReader, error)
}

// Sample samples sandbox sb once. With oneShot the engine answers at once, without a
// previous sample, so CPUPercent is -1; otherwise it takes a second sample (about a second)
// to measure CPU use.
func Sample(ctx context.Context, eng Engine, sb *sandbox.Sandbox, oneShot bool) (Stats, error) {
	var r container.StatsResponseReader
	var err error
	if oneShot {
		r, err = eng.ContainerStatsOneShot(ctx, sb.ID)
	} else {
		r, err = eng.ContainerStats(ctx, sb.ID, false)
	}
	if err != nil {
		return Stats{}, errs.Engine(fmt.Sprintf("reading the stats of sandbox %q", sb.Name), err)
	}
	defer r.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
		return Stats{}, errs.Engine(fmt.Sprintf("reading the stats of sandbox %q", sb.Name), err)
	}
	return From(sb, &s), nil
}

// Stream calls fn with a new sample of sandbox sb about every second until ctx ends or
// the sandbox goes away; it returns nil then.
func Stream(ctx context.Context, eng Engine, sb *sandbox.Sandbox, fn func(Stats)) error {
	r, err := eng.ContainerStats(ctx, sb.ID, true)
	if err != nil {
		return errs.Engine(fmt.Sprintf("reading the stats of sandbox %q", sb.Name), err)
	}
	defer r.Body.Close()
	dec := json.NewDecoder(r.Body)
	for {
		var s container.StatsResponse
		if err := dec.Decode(&s); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return errs.Engine(fmt.Sprintf("reading the stats of sandbox %q", sb.Name), err)
		}
		fn(From(sb, &s))
	}
}
