package agentd

import (
	"os"
	"strconv"
	"strings"
)

// cgroupLimits answers a limits query (PROTOCOL.md, "Limits"): the memory, pids and CPU
// limits of the sandbox's cgroup as its files say, cgroup v2's first, then v1's; a limit
// whose file the agent cannot read is left out, so that sbx tells "unknown" from "none".
func cgroupLimits() string {
	var b strings.Builder
	if v, ok := firstLimit(readLimit(cgroupRoot+"/memory.max"), readV1Memory()); ok {
		b.WriteString("memory=" + v + "\n")
	}
	if v, ok := firstLimit(readLimit(cgroupRoot+"/pids.max"), readLimit(cgroupRoot+"/pids/pids.max")); ok {
		b.WriteString("pids=" + v + "\n")
	}
	if v, ok := firstLimit(readV2CPU(), readV1CPU()); ok {
		b.WriteString("cpu=" + v + "\n")
	}
	return b.String()
}

// cgroupRoot is where the sandbox's cgroup files are; a test's own directory in tests.
var cgroupRoot = "/sys/fs/cgroup"

type limit struct {
	value string
	ok    bool
}

func firstLimit(all ...limit) (string, bool) {
	for _, l := range all {
		if l.ok {
			return l.value, true
		}
	}
	return "", false
}

// readLimit reads a file that holds "max" or a count.
func readLimit(path string) limit {
	b, err := os.ReadFile(path)
	if err != nil {
		return limit{}
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return limit{"max", true}
	}
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		return limit{}
	}
	return limit{v, true}
}

// readV1Memory reads v1's limit, whose "none" is the largest page-aligned int64.
func readV1Memory() limit {
	l := readLimit(cgroupRoot + "/memory/memory.limit_in_bytes")
	if n, err := strconv.ParseUint(l.value, 10, 64); l.ok && err == nil && n >= 1<<62 {
		return limit{"max", true}
	}
	return l
}

// readV2CPU reads cpu.max, "QUOTA PERIOD" or "max PERIOD", as QUOTA/PERIOD.
func readV2CPU() limit {
	b, err := os.ReadFile(cgroupRoot + "/cpu.max")
	if err != nil {
		return limit{}
	}
	quota, period, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	return cpuLimit(quota, period, ok && quota == "max")
}

// readV1CPU reads cfs_quota_us (-1: none) and cfs_period_us as QUOTA/PERIOD.
func readV1CPU() limit {
	for _, dir := range []string{cgroupRoot + "/cpu", cgroupRoot + "/cpu,cpuacct"} {
		q, qerr := os.ReadFile(dir + "/cpu.cfs_quota_us")
		p, perr := os.ReadFile(dir + "/cpu.cfs_period_us")
		if qerr == nil && perr == nil {
			quota := strings.TrimSpace(string(q))
			return cpuLimit(quota, strings.TrimSpace(string(p)), quota == "-1")
		}
	}
	return limit{}
}

func cpuLimit(quota, period string, none bool) limit {
	if _, err := strconv.ParseUint(period, 10, 64); err != nil {
		return limit{}
	}
	if none {
		return limit{"max/" + period, true}
	}
	if _, err := strconv.ParseUint(quota, 10, 64); err != nil {
		return limit{}
	}
	return limit{quota + "/" + period, true}
}
