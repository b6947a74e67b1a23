package testenv

import (
	"fmt"
	"testing"
)

// recorder is a testing.TB that records how Missing ended it instead of ending.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestMissing(t *testing.T) {
	const require = "SBX_REQUIRE_TESTENV_TEST"
	for _, tt := range []struct {
		value, skipped, failed string
	}{
		{"", "no widget here (set SBX_REQUIRE_TESTENV_TEST=1 to fail instead)", ""},
		{"0", "no widget here (set SBX_REQUIRE_TESTENV_TEST=1 to fail instead)", ""},
		{"1", "", "SBX_REQUIRE_TESTENV_TEST=1 but no widget here"},
	} {
		t.Setenv(require, tt.value)
		r := &recorder{TB: t}
		Missing(r, require, "no %s here", "widget")
		if r.skipped != tt.skipped || r.failed != tt.failed {
			t.Errorf("%s=%q: skipped %q, failed %q", require, tt.value, r.skipped, r.failed)
		}
	}
}
