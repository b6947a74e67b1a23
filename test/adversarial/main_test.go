package adversarial_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// run labels everything this run creates (sbx.test=run), so the final sweep finds leftovers.
var run = clitest.Label("adv")

// probeBin is the static probe, built once in TestMain; the sbx binary is clitest's.
var probeBin string

func TestMain(m *testing.M) {
	os.Exit(mainRun(m))
}

func mainRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sbx-adv-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	defer clitest.RemoveBinary()
	probeBin = filepath.Join(dir, "probe")
	// Static, so it runs in any image; the sandbox's /tmp is noexec, so tests put it in the
	// project, which is bind-mounted (read-only, but not noexec) at /workspace.
	const probePkg = "github.com/sbx-sandbox/sbx/test/adversarial/probe"
	cmd := exec.Command("go", "build", "-o", probeBin, probePkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", probePkg, err, out)
		return 1
	}
	code := m.Run()
	if err := sweep(); err != nil {
		fmt.Fprintf(os.Stderr, "sweeping leftovers of run %s: %v\n", run, err)
		code = 1
	}
	for _, g := range groups {
		fmt.Println(g.summary())
	}
	return code
}

// sweep removes whatever a failed test left on the shared engine under this run's label.
func sweep() error {
	home, _ := os.UserHomeDir()
	ep, err := engine.ResolveEndpoint(os.Getenv, home, "")
	if err != nil {
		return nil
	}
	ctx := context.Background()
	eng, err := engine.Connect(ctx, ep, nil)
	if err != nil {
		return nil // no engine: the tests said so already
	}
	defer eng.Close()
	if err := enginetest.Sweep(ctx, eng, run); err != nil {
		return err
	}
	vols, err := eng.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+run))})
	if err != nil {
		return err
	}
	for _, v := range vols.Volumes {
		if err := eng.VolumeRemove(ctx, v.Name, true); err != nil {
			return err
		}
	}
	return nil
}

// group counts the outcomes of one of the suite's groups for its summary line. A case the
// host cannot run is counted apart, never as passed.
type group struct {
	name                   string
	mu                     sync.Mutex
	passed, failed, cannot int
}

// isolations are the levels the probes from inside run at, each counted apart: gVisor must
// hold against the same probes as the default.
var isolations = []string{config.IsolationContainer, config.IsolationGVisor}

// atLevels is one group per isolation level.
func atLevels(name string) map[string]*group {
	out := map[string]*group{}
	for _, iso := range isolations {
		out[iso] = &group{name: name + " (" + iso + ")"}
	}
	return out
}

var (
	probesGroups = atLevels("probes from inside")
	claimedGroup = &group{name: "probes from inside (a sandbox taken from the pool)"}
	abuseGroup   = &group{name: "resource abuse"}
	configGroup  = &group{name: "hostile configuration"}
	filesGroup   = &group{name: "hostile files"}
	faultsGroup  = &group{name: "load and faults"}
	trustGroup   = &group{name: "untrusted project files"}
	groups       = []*group{
		probesGroups[config.IsolationContainer], probesGroups[config.IsolationGVisor], claimedGroup,
		abuseGroup, configGroup, filesGroup, faultsGroup, trustGroup,
	}
	cannotPrefix = "cannot run here: "
)

func (g *group) summary() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := fmt.Sprintf("%s: %d passed, %d failed", g.name, g.passed, g.failed)
	if g.cannot > 0 {
		s += fmt.Sprintf(", %d cannot run here", g.cannot)
	}
	return s
}

func (g *group) record(t *testing.T) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case t.Failed():
		g.failed++
	case t.Skipped():
		g.cannot++
	default:
		g.passed++
	}
}

// scope is one top-level test of a group. Its cases (subtests marked with case_) are what
// the summary counts; a test without cases counts as one, and a test that failed outside
// its cases (in its setup, say) adds one failure so it cannot vanish from the count.
type scope struct {
	g                  *group
	mu                 sync.Mutex
	cases, failedCases int
}

// start marks t as a test of group g.
func (g *group) start(t *testing.T) *scope {
	s := &scope{g: g}
	t.Cleanup(func() {
		s.mu.Lock()
		cases, failed := s.cases, s.failedCases
		s.mu.Unlock()
		switch {
		case cases == 0:
			g.record(t)
		case t.Failed() && failed == 0:
			g.mu.Lock()
			g.failed++
			g.mu.Unlock()
		}
	})
	return s
}

// case_ marks subtest t as one counted case of the scope.
func (s *scope) case_(t *testing.T) {
	s.mu.Lock()
	s.cases++
	s.mu.Unlock()
	t.Cleanup(func() {
		s.g.record(t)
		if t.Failed() {
			s.mu.Lock()
			s.failedCases++
			s.mu.Unlock()
		}
	})
}

// cannotRun skips t as a case this host cannot run, with the reason.
func cannotRun(t *testing.T, format string, a ...any) {
	t.Helper()
	t.Skipf(cannotPrefix+format, a...)
}
