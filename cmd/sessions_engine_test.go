package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sbx-sandbox/sbx/internal/clitest"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// These tests drive sbx sh, pause and resume, maxRunning and stats through the real binary
// against the real engine.

func TestCLIShellSessions(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-sh"
	c.Write("src/.keep", "")
	sh := func(args ...string) clitest.Result {
		t.Helper()
		return c.Run(append([]string{"sh", "-n", name}, args...)...)
	}
	if r := sh("-c", `cd src && export X=1; f() { echo "f$1"; }; alias hi='echo hello'`); r.Code != 0 || r.Stdout != "" {
		t.Fatalf("first call: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := sh("-c", "pwd; echo $X; f 2; hi"); r.Code != 0 || r.Stdout != "/workspace/src\n1\nf2\nhello\n" || r.Stderr != "" {
		t.Errorf("state: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}

	// Output the way a prompt-matching shell would get wrong, byte for byte.
	var all bytes.Buffer
	for i := 0; i < 4096; i++ {
		for b := 0; b < 256; b++ {
			all.WriteByte(byte(b))
		}
	}
	for _, tt := range []struct{ script, stdout, stderr string }{
		{`printf 'x\n$ '`, "x\n$ ", ""},
		{`echo 12345`, "12345\n", ""},
		{`printf 'no newline'; printf 'err, no newline' >&2`, "no newline", "err, no newline"},
		{`printf '\0\377\200\n'`, "\x00\xff\x80\n", ""},
		{`python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 4096)'`, all.String(), ""},
	} {
		r := sh("-c", tt.script)
		if r.Code != 0 || r.Stdout != tt.stdout || r.Stderr != tt.stderr {
			t.Errorf("%s: exit %d stdout %d bytes %.60q stderr %q", tt.script, r.Code, len(r.Stdout), r.Stdout, r.Stderr)
		}
	}
	if r := sh("-c", "echo out; echo err >&2; return 3"); r.Code != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("status: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}

	// A timeout interrupts the command and keeps the session.
	r := sh("--timeout", "1s", "-c", "echo started; sleep 100")
	if r.Code != 124 || r.Stdout != "started\n" || r.Took > 10*time.Second || !strings.Contains(r.Stderr, "the session keeps its state") {
		t.Errorf("timeout: exit %d after %s, stdout %q stderr %q", r.Code, r.Took, r.Stdout, r.Stderr)
	}
	if r := sh("-c", "echo $X $PWD"); r.Stdout != "1 /workspace/src\n" || r.Stderr != "" {
		t.Errorf("after the timeout: %q %q", r.Stdout, r.Stderr)
	}
	if s := c.sleepers(name); s != "" {
		t.Errorf("left running after the timeout:\n%s", s)
	}

	// Calls on one session run one after the other, never interleaved.
	sh("-c", ": >/tmp/order")
	var wg sync.WaitGroup
	for _, id := range []string{"A", "B", "C"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := sh("-c", fmt.Sprintf("echo %s1 >>/tmp/order; sleep 0.7; echo %s2 >>/tmp/order", id, id)); r.Code != 0 {
				t.Errorf("call %s: exit %d %q", id, r.Code, r.Stderr)
			}
		}()
	}
	wg.Wait()
	order := strings.Fields(sh("-c", "cat /tmp/order").Stdout)
	if len(order) != 6 {
		t.Fatalf("order %v", order)
	}
	for i := 0; i < 6; i += 2 {
		if order[i][0] != order[i+1][0] || order[i][1] != '1' || order[i+1][1] != '2' {
			t.Errorf("calls interleaved: %v", order)
		}
	}

	// A shell killed from inside the call (as the OOM killer would) is replaced by the next
	// call, which says so.
	r = sh("-c", "kill -KILL $$")
	if r.Code != 137 || !strings.Contains(r.Stderr, "exited (status 137); the next call starts a new one") {
		t.Errorf("killed shell: exit %d stderr %q", r.Code, r.Stderr)
	}
	r = sh("-c", `echo "${X:-unset} $PWD"`)
	if r.Code != 0 || r.Stdout != "unset /workspace\n" || !strings.Contains(r.Stderr, "had ended (exit status 137)") {
		t.Errorf("after the kill: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	sh("-c", "export Y=2")
	if r = sh("--reset"); r.Code != 0 || !strings.Contains(r.Stderr, "started a new shell") {
		t.Errorf("--reset: exit %d %q", r.Code, r.Stderr)
	}
	if r = sh("-c", `echo "${Y:-unset}"`); r.Stdout != "unset\n" {
		t.Errorf("after --reset: %q", r.Stdout)
	}

	sh("-s", "build", "-c", "cd /tmp")
	r = sh("--list")
	if r.Code != 0 || !strings.Contains(r.Stdout, "default\tidle\t/workspace\t") || !strings.Contains(r.Stdout, "build\tidle\t/tmp\t") {
		t.Errorf("--list: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	var sessions []struct{ Session, State, Cwd string }
	if err := json.Unmarshal([]byte(sh("--list", "--json").Stdout), &sessions); err != nil || len(sessions) != 2 || sessions[1].Session != "default" {
		t.Errorf("--list --json: %+v %v", sessions, err)
	}
}

// The shell tool of sbx mcp shares the sessions of sbx sh.
func TestCLIMCPShell(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-mcpsh"
	cs := c.mcpSession(c.Project, "-n", name)
	type shellOut struct {
		Stdout, Stderr, Notice string
		ExitCode               int
		TimedOut               bool
	}
	var o shellOut
	if res := mcpCall(t, cs, "shell", map[string]any{"command": "cd /tmp; export X=1"}, &o); res.IsError || o.ExitCode != 0 {
		t.Fatalf("shell: %+v %s", o, resultText(res))
	}
	res := mcpCall(t, cs, "shell", map[string]any{"command": `printf '%s $ ' "$PWD $X"; echo e >&2`}, &o)
	if res.IsError || o.Stdout != "/tmp 1 $ " || o.Stderr != "e\n" || o.Notice != "" {
		t.Errorf("state: %+v %s", o, resultText(res))
	}
	res = mcpCall(t, cs, "shell", map[string]any{"command": "sleep 30", "timeoutSeconds": 1}, &o)
	if res.IsError || !o.TimedOut {
		t.Errorf("timeout: %+v %s", o, resultText(res))
	}
	if r := c.Run("sh", "-n", name, "-c", "echo $X"); r.Stdout != "1\n" {
		t.Errorf("sbx sh does not see the session: %q %q", r.Stdout, r.Stderr)
	}
	res = mcpCall(t, cs, "shell", map[string]any{"command": "exit 4"}, &o)
	if res.IsError || o.ExitCode != 4 || !strings.Contains(o.Notice, "exited (status 4)") {
		t.Errorf("exit: %+v %s", o, resultText(res))
	}
	res = mcpCall(t, cs, "shell", map[string]any{"command": "echo ${X:-fresh}", "session": "default"}, &o)
	if res.IsError || o.Stdout != "fresh\n" || !strings.Contains(o.Notice, "had ended") {
		t.Errorf("after exit: %+v %s", o, resultText(res))
	}
}

// A paused sandbox keeps its processes: a background counter carries on from where it was.
func TestCLIPauseResume(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-pause"
	r := c.Run("exec", "-n", name, "-d", "--", "bash", "-c", "n=0; while :; do n=$((n+1)); echo $n >/tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.1; done")
	if r.Code != 0 {
		t.Fatalf("exec -d: %d %q", r.Code, r.Stderr)
	}
	// The counter is read from the host, through the sandbox's root as its init process sees
	// it, so reading it never wakes a paused sandbox and needs no timing.
	info, err := c.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil || info.State == nil || info.State.Pid == 0 {
		t.Fatalf("inspect: %v", err)
	}
	counterFile := fmt.Sprintf("/proc/%d/root/tmp/counter", info.State.Pid)
	counter := func() int {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			data, err := os.ReadFile(counterFile)
			if n, perr := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && perr == nil {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("counter: %q %v", data, err)
			}
		}
	}
	// waitPast waits for the counter to go past n: it runs.
	waitPast := func(n int) int {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if m := counter(); m > n {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("the counter stayed at %d", n)
			}
		}
	}
	waitPast(10)
	if r := c.Run("pause", name); r.Code != 0 || r.Stdout != name+"\n" {
		t.Fatalf("pause: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	before := counter()
	var ls []struct{ Name, Status string }
	if err := json.Unmarshal([]byte(c.Run("ls", "--json", "--filter", "name="+name).Stdout), &ls); err != nil || len(ls) != 1 || ls[0].Status != "paused" {
		t.Errorf("ls: %+v %v", ls, err)
	}
	if r := c.Run("ls", "--filter", "name="+name); !strings.Contains(r.Stdout, name+"\tpaused\t") {
		t.Errorf("ls table: %q", r.Stdout)
	}
	if r := c.Run("stats", name, "--no-stream"); r.Code != 0 || !strings.Contains(r.Stdout, name+"\tpaused\t") {
		t.Errorf("stats of a paused sandbox: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	// Frozen, the counter does not move at all: a second is ten of its steps.
	time.Sleep(time.Second)
	if still := counter(); still != before {
		t.Errorf("the counter moved while paused: %d then %d", before, still)
	}
	if r := c.Run("resume", name); r.Code != 0 || r.Stdout != name+"\n" {
		t.Fatalf("resume: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	// Carrying on, it starts from where it was (restarted, it would begin again at 1) and
	// goes on counting.
	after := counter()
	if after < before {
		t.Errorf("counter %d before the pause, %d after resuming", before, after)
	}
	waitPast(after)

	// exec on a paused sandbox resumes it, and says so.
	c.Run("pause", name)
	r = c.Run("exec", "-n", name, "--", "cat", "/tmp/counter")
	if n, _ := strconv.Atoi(strings.TrimSpace(r.Stdout)); r.Code != 0 || n < after || !strings.Contains(r.Stderr, `sandbox "`+name+`" is paused; resuming it`) {
		t.Errorf("exec on a paused sandbox: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	var ps []struct{ State string }
	if err := json.Unmarshal([]byte(c.Run("ps", "-n", name, "--json").Stdout), &ps); err != nil || len(ps) != 1 || ps[0].State != "running" {
		t.Errorf("the counter process: %+v %v", ps, err)
	}

	// prune treats a paused sandbox like any other.
	c.Run("pause", name)
	if r := c.Run("prune", "--dry-run", "--all", "--filter", "name="+name); !strings.Contains(r.Stdout, "would remove "+name+" (--all)") {
		t.Errorf("prune --dry-run: %q %q", r.Stdout, r.Stderr)
	}
	if r := c.Run("resume", name+"-none"); r.Code != 1 || !strings.Contains(r.Stderr, "not found") {
		t.Errorf("resume of a missing sandbox: %d %q", r.Code, r.Stderr)
	}
}

// Ten sbx processes start ten sandboxes under maxRunning: 3. The engine never runs more than
// three of them, and every command succeeds.
func TestCLIMaxRunningRace(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "maxRunning: 3\n")
	c.Trust()
	prefix := cliRun + "-cap"
	ctx, stop := context.WithCancel(context.Background())
	peak := make(chan int)
	go func() {
		most := 0
		args := filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+cliRun), filters.Arg("name", prefix), filters.Arg("status", "running"))
		for ctx.Err() == nil {
			if list, err := c.Eng.ContainerList(ctx, container.ListOptions{Filters: args}); err == nil {
				most = max(most, len(list))
			}
			time.Sleep(50 * time.Millisecond)
		}
		peak <- most
	}()
	results := make([]clitest.Result, 10)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.Run("exec", "-n", fmt.Sprintf("%s%d", prefix, i), "--", "sh", "-c", fmt.Sprintf("sleep 1; echo ok %d", i))
		}()
	}
	wg.Wait()
	stop()
	most := <-peak
	evicted := 0
	for i, r := range results {
		if r.Code != 0 || r.Stdout != fmt.Sprintf("ok %d\n", i) {
			t.Errorf("exec %d: exit %d stdout %q stderr %q", i, r.Code, r.Stdout, r.Stderr)
		}
		evicted += strings.Count(r.Stderr, "maxRunning 3: paused sandbox")
	}
	if most > 3 || most == 0 {
		t.Errorf("up to %d sandboxes ran at once, want at most 3", most)
	}
	if evicted < 7 {
		t.Errorf("%d evictions announced, want at least 7", evicted)
	}
	list, err := c.Eng.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+cliRun), filters.Arg("name", prefix))})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]int{}
	for _, ctr := range list {
		states[ctr.State]++
	}
	if len(list) != 10 || states["running"] > 3 || states["running"]+states["paused"] != 10 {
		t.Errorf("sandboxes afterwards: %v", states)
	}
}

// stats reports the memory limit the sandbox was configured with.
func TestCLIStatsMemoryLimit(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "memory: 512m\n")
	name := cliRun + "-stats"
	if r := c.Run("create", "-n", name); r.Code != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	r := c.Run("stats", name, "--no-stream", "--json")
	var stats []struct {
		Name        string  `json:"name"`
		MemoryLimit int64   `json:"memoryLimitBytes"`
		MemoryUsage int64   `json:"memoryUsageBytes"`
		PIDs        int     `json:"pids"`
		PIDsLimit   int     `json:"pidsLimit"`
		CPUPercent  float64 `json:"cpuPercent"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &stats); err != nil || r.Code != 0 || len(stats) != 1 {
		t.Fatalf("stats --json: %d %v %q %q", r.Code, err, r.Stdout, r.Stderr)
	}
	s := stats[0]
	if s.Name != name || s.MemoryLimit != 512<<20 || s.MemoryUsage <= 0 || s.PIDs < 1 || s.PIDsLimit != 256 || s.CPUPercent < 0 {
		t.Errorf("stats %+v", s)
	}
	if r := c.Run("stats", name); r.Code != 0 || !strings.HasPrefix(r.Stdout, "NAME\tSTATUS\tCPU %") || !strings.Contains(r.Stdout, " / 512MiB\t") {
		t.Errorf("piped stats: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}
