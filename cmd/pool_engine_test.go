package cmd

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// poolEntry is one line of "sbx pool ls --json".
type poolEntry struct {
	Name   string `json:"name"`
	ID     string `json:"id"`
	Key    string `json:"key"`
	Status string `json:"status"`
}

func (c *cli) pool() []poolEntry {
	c.T.Helper()
	r := c.Run("pool", "ls", "--json")
	var list []poolEntry
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil {
		c.T.Fatalf("pool ls --json: %s", r)
	}
	return list
}

// waitRefill waits until the pool holds want running sandboxes of which none is in before:
// the detached fill a claim started has replaced what was taken. A fill stops at want, so
// once it is reached no fill started so far makes more.
func (c *cli) waitRefill(before []poolEntry, want int) []poolEntry {
	c.T.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list := c.pool()
		fresh := 0
		for _, p := range list {
			if p.Status == "running" && !slices.ContainsFunc(before, func(b poolEntry) bool { return b.ID == p.ID }) {
				fresh++
			}
		}
		if len(list) == want && fresh > 0 {
			return list
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("the pool was not refilled: %+v (before the claim: %+v)", list, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// poolContainers lists the containers of the engine made for this test's pool, claimed or not.
func (c *cli) poolContainers() []container.Summary {
	c.T.Helper()
	list, err := c.Eng.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelProject+"="+c.Project), filters.Arg("label", sandbox.LabelPool))})
	if err != nil {
		c.T.Fatal(err)
	}
	var out []container.Summary
	for _, ctr := range list {
		if ctr.Labels[sandbox.LabelPool] != "" {
			out = append(out, ctr)
		}
	}
	return out
}

// insideProbe prints, from inside a sandbox, what a fresh sandbox must show as well: its host
// name, what is in its scratch mounts and workspace, and every process that is neither
// the engine's init, sbx's agent, nor this command (PROBE) and its watchdog. Builtins only,
// so the probe itself starts no process to list.
const insideProbe = `: PROBE; hostname; for d in /tmp /var/tmp /run /dev/shm /workspace; do echo "$d:" "$(ls -A "$d")"; done
for p in /proc/[0-9]*; do c=; while IFS= read -r -d '' a; do c+="$a "; done <"$p/cmdline"
  case "${p#/proc/}:$c" in 1:*|*/run/sbx-agent-bin/sbx*|*PROBE*|*sbx-watch*|:) ;; *) echo "foreign: $c";; esac; done`

var takenFrom = regexp.MustCompile(`sandbox "([a-z0-9-]+)" taken from the pool \((pool-[0-9a-f]{10})\)`)

// A pooled configuration: pool fill starts its sandboxes, pool ls lists them, a new sandbox
// (exec -n NEW, exec --rm) is one of them renamed, as clean as a created one, and the pool is
// refilled behind it; drain removes what is left, and never a claimed sandbox.
func TestCLIPool(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "workspace: none\n")
	pooled := append(c.Env[:len(c.Env):len(c.Env)], "SBX_POOL=2")
	c.Env = pooled

	r := c.Run("pool", "fill", "--json")
	var fill struct {
		Key     string   `json:"key"`
		Ready   int      `json:"ready"`
		Created []string `json:"created"`
	}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &fill) != nil || fill.Ready != 2 || len(fill.Created) != 2 {
		t.Fatalf("pool fill --json: %s", r)
	}
	before := c.pool()
	if len(before) != 2 || before[0].Status != "running" || before[1].Status != "running" || before[0].Key != fill.Key {
		t.Fatalf("pool ls: %+v, want the two it filled, running", before)
	}
	if r := c.Run("pool", "ls"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "NAME\tKEY\tSTATUS\tAGE\tIMAGE\tPROJECT\n") || strings.Count(r.Stdout, "\n") != 3 {
		t.Errorf("pool ls, piped: %s", r)
	}
	if r := c.Run("exec", "-n", fill.Created[0], "--", "true"); r.Code != 125 || !strings.Contains(r.Stderr, "is a pooled sandbox") {
		t.Errorf("a pooled sandbox used by its name: %s", r)
	}

	// A sandbox created as sandboxes are without a pool: what a claimed one must look like.
	fresh := c.In(t)
	fresh.Env = append(fresh.Env, "SBX_POOL=0")
	want := fresh.Run("exec", "-n", cliRun+"-fresh", "--", "bash", "-c", insideProbe)
	if want.Code != 0 || strings.Contains(want.Stderr, "taken from the pool") || strings.Contains(want.Stdout, "foreign") {
		t.Fatalf("fresh sandbox: %s", want)
	}

	name := cliRun + "-claimed"
	r = c.Run("exec", "-n", name, "--", "bash", "-c", insideProbe)
	m := takenFrom.FindStringSubmatch(r.Stderr)
	if r.Code != 0 || m == nil || m[1] != name || !slices.ContainsFunc(before, func(p poolEntry) bool { return p.Name == m[2] }) {
		t.Fatalf("exec -n NEW was not taken from the pool: %s", r)
	}
	if r.Stdout != want.Stdout {
		t.Errorf("the claimed sandbox differs from a fresh one from inside:\nclaimed: %q\nfresh:   %q", r.Stdout, want.Stdout)
	}
	if ctrs := c.Containers(name); len(ctrs) != 1 || !slices.ContainsFunc(before, func(p poolEntry) bool { return p.ID == ctrs[0].ID }) {
		t.Errorf("container of %s: %+v, want the pooled one", name, ctrs)
	}
	var ls []struct {
		Name      string `json:"name"`
		Workspace struct {
			Path string `json:"path"`
		} `json:"workspace"`
		Config string `json:"config"`
	}
	if r := c.Run("ls", "--json", "--filter", "project="+c.Project); json.Unmarshal([]byte(r.Stdout), &ls) != nil || len(ls) != 2 {
		t.Fatalf("ls: %s", r)
	}
	for _, e := range ls {
		if e.Name == name && (e.Workspace.Path != "sbx-"+m[2]+"-ws" || e.Config != "ok") {
			t.Errorf("ls shows the claimed sandbox as %+v", e)
		}
	}
	after := c.waitRefill(before, 2)

	// A throwaway task takes one too, and leaves nothing of it.
	r = c.Run("exec", "--rm", "--", "bash", "-c", "hostname")
	m = takenFrom.FindStringSubmatch(r.Stderr)
	if r.Code != 0 || m == nil || !strings.HasPrefix(m[1], sandbox.ThrowawayPrefix) || r.Stdout != "sbx\n" {
		t.Fatalf("exec --rm was not taken from the pool: %s", r)
	}
	for _, n := range []string{m[1], m[2]} {
		if left := c.remains(n); len(left) > 0 {
			t.Errorf("left of %s: %v", n, left)
		}
	}
	c.waitRefill(after, 2)

	// rm of a claimed sandbox removes what its pool name names.
	if r := c.Run("rm", "-f", name); r.Code != 0 {
		t.Fatalf("rm: %s", r)
	}
	if left := c.remains(name); len(left) > 0 {
		t.Errorf("left of %s: %v", name, left)
	}

	r = c.Run("pool", "drain", "--json")
	var drained []string
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &drained) != nil || len(drained) != 2 {
		t.Fatalf("pool drain --json: %s", r)
	}
	if list := c.pool(); len(list) != 0 {
		t.Errorf("pool after drain: %+v", list)
	}
	if left := c.poolContainers(); len(left) != 0 {
		t.Errorf("containers of the pool after drain: %v", left[0].Names)
	}
	for _, n := range drained {
		if left := c.remains(n); len(left) > 0 {
			t.Errorf("left of %s: %v", n, left)
		}
	}
	if r := c.Run("exec", "-n", cliRun+"-fresh", "--", "true"); r.Code != 0 {
		t.Errorf("drain touched a sandbox: %s", r)
	}
}

// A configuration that mounts the project is not pooled: fill says why, and exec creates.
func TestCLIPoolRefusesProjectMounts(t *testing.T) {
	c := newCLI(t)
	c.Env = append(c.Env, "SBX_POOL=1")
	if r := c.Run("pool", "fill"); r.Code != 125 || !strings.Contains(r.Stderr, "workspace ro mounts the project") {
		t.Errorf("pool fill with workspace ro: %s", r)
	}
	if r := c.Run("exec", "--", "true"); r.Code != 0 || strings.Contains(r.Stderr, "pool") {
		t.Errorf("exec: %s", r)
	}
}

// idleStop: a pooled sandbox stops itself when unclaimed for that long, the next fill
// replaces it, and a claimed sandbox hands its idle lock to its new name, so it stops for
// idleness as a created one does.
func TestCLIPoolIdleStop(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "workspace: none\n")
	c.Env = append(c.Env, "SBX_POOL=1", "SBX_IDLE_STOP=8s")
	var fill struct {
		Created []string `json:"created"`
		Removed []string `json:"removed"`
	}
	r := c.Run("pool", "fill", "--json")
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &fill) != nil || len(fill.Created) != 1 {
		t.Fatalf("pool fill: %s", r)
	}
	first := fill.Created[0]
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if list := c.pool(); len(list) == 1 && list[0].Status == "exited" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the pooled sandbox did not stop for idleness: %+v", list)
		}
	}
	r = c.Run("pool", "fill", "--json")
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &fill) != nil || !slices.Equal(fill.Removed, []string{first}) || len(fill.Created) != 1 {
		t.Fatalf("pool fill after the stop: %s, want %s removed and one started", r, first)
	}
	name := cliRun + "-idle"
	r = c.Run("exec", "-n", name, "--", "true")
	if m := takenFrom.FindStringSubmatch(r.Stderr); r.Code != 0 || m == nil || m[2] != fill.Created[0] {
		t.Fatalf("exec -n NEW: %s, want %s taken from the pool", r, fill.Created[0])
	}
	state := filepath.Join(c.Home, ".state", "sbx")
	held, err := os.Stat(filepath.Join(state, "leases", "."+name+".idle"))
	if err != nil {
		t.Fatal(err)
	}
	watched, err := os.Stat(filepath.Join(state, "agent", fill.Created[0], "idle.lock"))
	if err != nil || !os.SameFile(held, watched) {
		t.Fatalf("the idle lock leases of %s take is not the one its agent watches: %v", name, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if list := c.Containers(name); len(list) == 1 && list[0].State == "exited" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the claimed sandbox did not stop for idleness: %+v", list)
		}
	}
	// The refill the claim started (its sandbox may have stopped for idleness too by now).
	for deadline := time.Now().Add(time.Minute); len(c.pool()) != 1; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool was not refilled")
		}
	}
}

// Many first commands of one new sandbox at once: one takes a pooled sandbox, the others use
// it, and no claim undoes another's.
func TestCLIPoolConcurrentClaims(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "workspace: none\n")
	c.Env = append(c.Env, "SBX_POOL=2")
	if r := c.Run("pool", "fill"); r.Code != 0 {
		t.Fatalf("pool fill: %s", r)
	}
	before := c.pool()
	name := cliRun + "-race"
	var cmds []*exec.Cmd
	for range 10 {
		cmds = append(cmds, c.Cmd("exec", "-n", name, "--", "echo", "ok"))
	}
	taken := 0
	for i, r := range clitest.Concurrently(cmds) {
		if r.Code != 0 || r.Stdout != "ok\n" {
			t.Errorf("exec %d: %s", i, r)
		}
		if strings.Contains(r.Stderr, "taken from the pool") {
			taken++
		}
	}
	ctrs := c.Containers(name)
	if taken != 1 || len(ctrs) != 1 || !slices.ContainsFunc(before, func(p poolEntry) bool { return p.ID == ctrs[0].ID }) {
		t.Errorf("%d commands took from the pool, containers %v; want one, a pooled one", taken, ctrs)
	}
	if r := c.Run("exec", "-n", name, "--", "true"); r.Code != 0 {
		t.Errorf("the claimed sandbox after the race: %s", r)
	}
	c.waitRefill(before, 2)
}
