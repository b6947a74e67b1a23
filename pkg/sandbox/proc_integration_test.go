package sandbox_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/snippet"
)

func TestProcSurvivesItsClient(t *testing.T) {
	onEach(t, func(t *testing.T, iso string) {
		e := newEnv(t, isolated(iso, nil))
		sb := e.ensure().Sandbox
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		id, err := e.m.StartProc(ctx, sb, sandbox.ProcOptions{
			Cmd: []string{"sh", "-c", `echo "$FOO in $(pwd) as $(id -u)"; echo warn >&2; sleep 100 & sleep 101`},
			Env: []string{"FOO=bar"}, WorkDir: "/tmp", User: "1000:1000",
		})
		// The client goes away as soon as the process is started.
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("StartProc took %s", took)
		}
		time.Sleep(300 * time.Millisecond)
		bg := context.Background()
		p, err := e.m.Proc(bg, sb, id)
		if err != nil || p.State != "running" || strings.Join(p.Command, " ") != `sh -c echo "$FOO in $(pwd) as $(id -u)"; echo warn >&2; sleep 100 & sleep 101` ||
			p.WorkDir != "/tmp" || p.User != "1000:1000" || p.PID == 0 || time.Since(p.StartedAt) > time.Minute {
			t.Fatalf("after the client left: %+v %v", p, err)
		}
		var out, errb bytes.Buffer
		if err := e.m.ProcLogs(bg, sb, id, sandbox.LogsOptions{Tail: -1, Stdout: &out, Stderr: &errb}); err != nil || out.String() != "bar in /tmp as 1000\n" || errb.String() != "warn\n" {
			t.Errorf("logs: %v %q %q", err, out.String(), errb.String())
		}
		if got := e.leftovers(); !strings.Contains(got, "sleep 100") || !strings.Contains(got, "sleep 101") {
			t.Errorf("the process or its child is gone: %q", got)
		}

		p, err = e.m.KillProc(bg, sb, id, "KILL")
		if err != nil || p.State != "exited" || p.ExitCode != 137 || p.TimedOut || p.EndedAt.IsZero() {
			t.Errorf("after KILL: %+v %v", p, err)
		}
		if got := e.leftovers(); got != "" {
			t.Errorf("left running after KILL:\n%s", got)
		}
		if _, err := e.m.KillProc(bg, sb, id, "TERM"); err == nil || !strings.Contains(err.Error(), "already exited") {
			t.Errorf("a second kill: %v", err)
		}
		if _, err := e.m.Proc(bg, sb, "000000"); !sandbox.IsProcNotFound(err) {
			t.Errorf("unknown ID: %v", err)
		}
		list, err := e.m.Procs(bg, sb)
		if err != nil || len(list) != 1 || list[0].ID != id {
			t.Errorf("list: %+v %v", list, err)
		}
	})
}

func TestProcFollowEndsWithItsContext(t *testing.T) {
	onEach(t, func(t *testing.T, iso string) {
		e := newEnv(t, isolated(iso, nil))
		sb := e.ensure().Sandbox
		id, err := e.m.StartProc(context.Background(), sb, sandbox.ProcOptions{Cmd: []string{"sh", "-c", "while :; do echo tick; sleep 0.2; done"}})
		if err != nil {
			t.Fatal(err)
		}
		// The context ends once the follower has printed two ticks; the deadline only fails
		// a follower that never prints (under gVisor on a loaded machine its start took
		// longer than the second this test once allowed).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out := &onOutput{want: "tick\ntick\n", f: cancel}
		err = e.m.ProcLogs(ctx, sb, id, sandbox.LogsOptions{Follow: true, Tail: -1, Stdout: out})
		out.mu.Lock()
		got := out.buf.String()
		out.mu.Unlock()
		if err == nil || !strings.HasPrefix(got, "tick\ntick\n") {
			t.Errorf("follow: %v, %q", err, got)
		}
		if o := e.sh("pgrep -f 'sbx-log[s]' || true"); o.stdout != "" {
			t.Errorf("the follower outlived its client: %q", o.stdout)
		}
		// The process itself is unaffected.
		if p, err := e.m.Proc(context.Background(), sb, id); err != nil || p.State != "running" {
			t.Errorf("%+v %v", p, err)
		}
	})
}

func TestRunCleansUpWhenInterrupted(t *testing.T) {
	onEach(t, func(t *testing.T, iso string) {
		e := newEnv(t, isolated(iso, nil))
		sb := e.ensure().Sandbox
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		res, err := snippet.Run(ctx, e.m, sb, snippet.Options{Lang: "bash", Code: []byte("echo started; sleep 100")})
		if err != nil || !res.Canceled {
			t.Fatalf("%+v %v", res, err)
		}
		if o := e.sh("find /tmp/sbx-run -mindepth 1"); o.stdout != "" {
			t.Errorf("left behind:\n%s", o.stdout)
		}
		if got := e.leftovers(); got != "" {
			t.Errorf("left running:\n%s", got)
		}
	})
}
