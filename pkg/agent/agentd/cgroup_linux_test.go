package agentd

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"v2", map[string]string{"memory.max": "1073741824\n", "pids.max": "256\n", "cpu.max": "200000 100000\n"},
			"memory=1073741824\npids=256\ncpu=200000/100000\n"},
		{"v2 none", map[string]string{"memory.max": "max\n", "pids.max": "max\n", "cpu.max": "max 100000\n"},
			"memory=max\npids=max\ncpu=max/100000\n"},
		{"v1", map[string]string{"memory/memory.limit_in_bytes": "1073741824\n", "pids/pids.max": "256\n",
			"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
			"memory=1073741824\npids=256\ncpu=50000/100000\n"},
		{"v1 none", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n", "pids/pids.max": "max\n",
			"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
			"memory=max\npids=max\ncpu=max/100000\n"},
		{"unreadable or garbled", map[string]string{"memory.max": "lots\n", "cpu.max": "100000\n"}, ""},
	} {
		cgroupRoot = t.TempDir()
		for name, body := range tc.files {
			path := filepath.Join(cgroupRoot, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := cgroupLimits(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	cgroupRoot = "/sys/fs/cgroup"
}
