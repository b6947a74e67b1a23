package agent

import "testing"

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits("memory=1073741824\npids=max\ncpu=50000/100000\n")
	if err != nil || l.Memory != 1<<30 || l.Pids != -1 || l.CPUQuota != 50000 || l.CPUPeriod != 100000 || len(l.Known) != 3 {
		t.Errorf("%+v, %v", l, err)
	}
	if l, err := ParseLimits(""); err != nil || len(l.Known) != 0 {
		t.Errorf("nothing readable: %+v, %v", l, err)
	}
	for _, bad := range []string{"memory=-5\n", "memory=1\nmemory=2\n", "swap=1\n", "cpu=100000\n", "cpu=1/0\n", "pids=\x1b[2J\n"} {
		if _, err := ParseLimits(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
