package proc_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/proc"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
)

func TestProcSurvivesItsClient(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		sb := e.Ensure().Sandbox
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		id, err := proc.Start(ctx, e.M, sb, proc.Options{
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
		p, err := proc.Get(bg, e.M, sb, id)
		if err != nil || p.State != "running" || strings.Join(p.Command, " ") != `sh -c echo "$FOO in $(pwd) as $(id -u)"; echo warn >&2; sleep 100 & sleep 101` ||
			p.WorkDir != "/tmp" || p.User != "1000:1000" || p.PID == 0 || time.Since(p.StartedAt) > time.Minute {
			t.Fatalf("after the client left: %+v %v", p, err)
		}
		var out, errb bytes.Buffer
		if err := proc.Logs(bg, e.M, sb, id, proc.LogsOptions{Tail: -1, Stdout: &out, Stderr: &errb}); err != nil || out.String() != "bar in /tmp as 1000\n" || errb.String() != "warn\n" {
			t.Errorf("logs: %v %q %q", err, out.String(), errb.String())
		}
		if got := e.Leftovers(); !strings.Contains(got, "sleep 100") || !strings.Contains(got, "sleep 101") {
			t.Errorf("the process or its child is gone: %q", got)
		}

		p, err = proc.Kill(bg, e.M, sb, id, "KILL")
		if err != nil || p.State != "exited" || p.ExitCode != 137 || p.TimedOut || p.EndedAt.IsZero() {
			t.Errorf("after KILL: %+v %v", p, err)
		}
		if got := e.Leftovers(); got != "" {
			t.Errorf("left running after KILL:\n%s", got)
		}
		if _, err := proc.Kill(bg, e.M, sb, id, "TERM"); err == nil || !strings.Contains(err.Error(), "already exited") {
			t.Errorf("a second kill: %v", err)
		}
		if _, err := proc.Get(bg, e.M, sb, "000000"); !proc.IsNotFound(err) {
			t.Errorf("unknown ID: %v", err)
		}
		list, err := proc.List(bg, e.M, sb)
		if err != nil || len(list) != 1 || list[0].ID != id {
			t.Errorf("list: %+v %v", list, err)
		}
	})
}

func TestProcFollowEndsWithItsContext(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		sb := e.Ensure().Sandbox
		id, err := proc.Start(context.Background(), e.M, sb, proc.Options{Cmd: []string{"sh", "-c", "while :; do echo tick; sleep 0.2; done"}})
		if err != nil {
			t.Fatal(err)
		}
		// The context ends once the follower has printed two ticks; the deadline only fails
		// a follower that never prints (under gVisor on a loaded machine its start took
		// longer than the second this test once allowed).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out := sandboxtest.OnOutput("tick\ntick\n", cancel)
		err = proc.Logs(ctx, e.M, sb, id, proc.LogsOptions{Follow: true, Tail: -1, Stdout: out})
		got := out.String()
		if err == nil || !strings.HasPrefix(got, "tick\ntick\n") {
			t.Errorf("follow: %v, %q", err, got)
		}
		if o := e.Sh("pgrep -f 'sbx-log[s]' || true"); o.Stdout != "" {
			t.Errorf("the follower outlived its client: %q", o.Stdout)
		}
		// The process itself is unaffected.
		if p, err := proc.Get(context.Background(), e.M, sb, id); err != nil || p.State != "running" {
			t.Errorf("%+v %v", p, err)
		}
	})
}
