package proc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

type shellOut struct {
	Res            *proc.ShellResult
	Stdout, Stderr string
}

// shell runs one call in a session of e's sandbox.
func shell(e *sandboxtest.Env, opts proc.ShellOptions) shellOut {
	e.T.Helper()
	res := e.Ensure()
	defer res.Lease.Release()
	var out, errb bytes.Buffer
	opts.Stdout, opts.Stderr = &out, &errb
	r, err := proc.Shell(context.Background(), e.M, res.Sandbox, opts)
	if err != nil {
		e.T.Fatalf("Shell %q: %v", opts.Script, err)
	}
	return shellOut{r, out.String(), errb.String()}
}

func shellCall(e *sandboxtest.Env, session, script string) shellOut {
	e.T.Helper()
	return shell(e, proc.ShellOptions{Session: session, Script: []byte(script), WorkDir: "/workspace"})
}

func TestShellKeepsStateBetweenCalls(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		o := shellCall(e, "", `mkdir -p /tmp/src && cd /tmp/src && export X=1; greet() { echo "hi $1"; }; alias ll='echo aliased'; Y=local`)
		if o.Res.ExitCode != 0 || o.Res.Started != "new" || o.Stdout != "" || o.Stderr != "" {
			t.Fatalf("first call: %+v %q %q", o.Res, o.Stdout, o.Stderr)
		}
		o = shellCall(e, "", `pwd; echo "$X $Y"; greet you; ll; bash -c 'echo "child sees ${X:-nothing}"'`)
		want := "/tmp/src\n1 local\nhi you\naliased\nchild sees 1\n"
		if o.Res.ExitCode != 0 || o.Stdout != want || o.Res.Started != "" {
			t.Errorf("second call: %+v stdout %q, want %q; stderr %q", o.Res, o.Stdout, want, o.Stderr)
		}
		// Another session is another shell.
		if o = shellCall(e, "other", `pwd; echo "${X:-unset}"`); o.Stdout != "/workspace\nunset\n" {
			t.Errorf("other session: %q %q", o.Stdout, o.Stderr)
		}
		list, err := proc.Sessions(context.Background(), e.M, e.Ensure().Sandbox)
		if err != nil || len(list) != 2 {
			t.Fatalf("sessions %+v %v", list, err)
		}
		// gVisor does not show another process's working directory (README, gVisor).
		cwd0, cwd1 := "/tmp/src", "/workspace"
		if iso == config.IsolationGVisor {
			cwd0, cwd1 = "", ""
		}
		if list[0].Name != "default" || list[0].Cwd != cwd0 || list[0].State != "idle" || list[0].StartedAt.IsZero() || list[1].Cwd != cwd1 {
			t.Errorf("sessions %+v", list)
		}
	})
}

func TestShellOutputIsExact(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		var all strings.Builder
		for i := 0; i < 256; i++ {
			fmt.Fprintf(&all, `\%03o`, i)
		}
		mib := strings.Repeat("0123456789abcdef", 1<<16)
		for _, tt := range []struct {
			name, script, stdout, stderr string
			code                         int
		}{
			{"a trailing prompt", `printf 'done\n$ '`, "done\n$ ", "", 0},
			{"a bare number", `echo 42`, "42\n", "", 0},
			{"a bare number, no newline", `printf 7; exit_code=3; (exit $exit_code)`, "7", "", 3},
			{"no trailing newline", `printf 'no newline'`, "no newline", "", 0},
			{"empty", ``, "", "", 0},
			{"streams apart", `echo out; echo err >&2; echo out2; printf 'e2' >&2; return 4`, "out\nout2\n", "err\ne2", 4},
			{"every byte", `printf '` + all.String() + `'; printf '\0\377' >&2`, all.String(), "\x00\xff", 0},
			{"1 MiB", `head -c 1048576 /dev/zero | tr '\0' x; python3 -c 'import sys; sys.stdout.write("0123456789abcdef" * 65536)' >&2`, strings.Repeat("x", 1<<20), mib, 0},
			{"a syntax error", `if then`, "", "syntax error", 2},
			{"stdin is empty", `cat; echo after`, "after\n", "", 0},
		} {
			t.Run(tt.name, func(t *testing.T) {
				o := shellCall(e, "", tt.script)
				wantOut := tt.stdout
				if tt.name == "every byte" {
					var b bytes.Buffer
					for i := 0; i < 256; i++ {
						b.WriteByte(byte(i))
					}
					wantOut = b.String()
				}
				errOK := o.Stderr == tt.stderr
				if tt.name == "a syntax error" {
					errOK = strings.Contains(o.Stderr, tt.stderr)
				}
				if o.Stdout != wantOut || !errOK || o.Res.ExitCode != tt.code {
					t.Errorf("exit %d (want %d)\nstdout %d bytes %.200q\nwant   %d bytes %.200q\nstderr %.200q", o.Res.ExitCode, tt.code, len(o.Stdout), o.Stdout, len(wantOut), wantOut, o.Stderr)
				}
			})
		}
	})
}

func TestShellTimeoutKeepsTheSession(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		shellCall(e, "", `cd /tmp && export KEEP=yes; sleep 300 & echo $! >/tmp/bgpid`)
		for _, tt := range []struct{ name, script string }{
			{"a child", `echo before; sleep 100 & sleep 100; echo not reached`},
			{"a builtin loop", `while :; do :; done`},
			{"a command that ignores SIGINT", `trap '' INT; sleep 100; echo after`},
			{"python", `python3 -c 'import time; print("py", flush=True); time.sleep(100)'`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				// The commands sleep 100 s: ending well before is what the bound checks (under
				// gVisor on a loaded machine the end took 8 s, past the bound this once had).
				start := time.Now()
				o := shell(e, proc.ShellOptions{Script: []byte(tt.script), Timeout: time.Second})
				if !o.Res.TimedOut || o.Res.ShellKilled || o.Res.ShellExited || time.Since(start) > time.Minute {
					t.Errorf("%+v after %s; stdout %q stderr %q", o.Res, time.Since(start), o.Stdout, o.Stderr)
				}
				o = shellCall(e, "", `trap - INT; echo "$PWD $KEEP"; kill -0 "$(cat /tmp/bgpid)" && echo bg alive`)
				if o.Stdout != "/tmp yes\nbg alive\n" || o.Res.Started != "" {
					t.Errorf("after the timeout: %+v %q %q", o.Res, o.Stdout, o.Stderr)
				}
			})
		}
		if s := e.Leftovers(); s != "sleep 300 " {
			t.Errorf("sleeps left: %q", s)
		}
	})
}

func TestShellCallsOnOneSessionAreSerialised(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		shellCall(e, "", `: >/tmp/log`)
		var wg sync.WaitGroup
		outs := make([]shellOut, 4)
		for i := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i] = shellCall(e, "", fmt.Sprintf(`echo %d-start >>/tmp/log; sleep 0.5; echo %d-end >>/tmp/log; echo %d`, i, i, i))
			}()
		}
		wg.Wait()
		for i, o := range outs {
			if o.Res.ExitCode != 0 || o.Stdout != fmt.Sprintf("%d\n", i) {
				t.Errorf("call %d: %+v %q %q", i, o.Res, o.Stdout, o.Stderr)
			}
		}
		lines := strings.Fields(shellCall(e, "", `cat /tmp/log`).Stdout)
		if len(lines) != 8 {
			t.Fatalf("log %q", lines)
		}
		for i := 0; i < 8; i += 2 {
			if n := strings.TrimSuffix(lines[i], "-start"); lines[i+1] != n+"-end" {
				t.Errorf("calls interleaved: %q", lines)
			}
		}

		// A call that cannot get the session in time says so, and runs nothing.
		done := make(chan struct{})
		go func() { defer close(done); shellCall(e, "", `sleep 3`) }()
		time.Sleep(time.Second)
		res := e.Ensure()
		defer res.Lease.Release()
		_, err := proc.Shell(context.Background(), e.M, res.Sandbox, proc.ShellOptions{Script: []byte("echo ran >>/tmp/log"), LockWait: 500 * time.Millisecond})
		var busy *proc.ShellBusyError
		if !errors.As(err, &busy) || !strings.Contains(err.Error(), "busy") {
			t.Errorf("second call: %v", err)
		}
		<-done
		if o := shellCall(e, "", `grep -c ran /tmp/log`); o.Stdout != "0\n" {
			t.Errorf("the refused call ran: %q", o.Stdout)
		}
	})
}

func TestShellThatDiedIsReplaced(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		shellCall(e, "", `cd /tmp; export GONE=1`)
		o := shellCall(e, "", `echo bye; exit 3`)
		if !o.Res.ShellExited || o.Res.ExitCode != 3 || o.Stdout != "bye\n" {
			t.Errorf("exit 3: %+v %q %q", o.Res, o.Stdout, o.Stderr)
		}
		o = shellCall(e, "", `pwd; echo "${GONE:-fresh}"`)
		if o.Res.Started != "replaced" || o.Res.PrevExit != "3" || o.Stdout != "/workspace\nfresh\n" {
			t.Errorf("after exit: %+v %q %q", o.Res, o.Stdout, o.Stderr)
		}
		// Killed from outside, as the OOM killer would.
		e.Sh(`read -r pid _ </tmp/.sbx-sh/default/pid && kill -KILL "$pid"`)
		o = shellCall(e, "", `echo alive`)
		if o.Res.Started != "replaced" || o.Res.PrevExit != "137" || o.Stdout != "alive\n" {
			t.Errorf("after a kill: %+v %q %q", o.Res, o.Stdout, o.Stderr)
		}
		// --reset on purpose.
		shellCall(e, "", `export R=1`)
		o = shell(e, proc.ShellOptions{Reset: true, NoScript: true})
		if o.Res.Started != "reset" || o.Res.ExitCode != 0 {
			t.Errorf("reset: %+v", o.Res)
		}
		if o = shellCall(e, "", `echo "${R:-clean}"`); o.Stdout != "clean\n" || o.Res.Started != "" {
			t.Errorf("after reset: %+v %q", o.Res, o.Stdout)
		}
	})
}

func TestShellStuckShellIsKilledAndReplaced(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		shellCall(e, "", `export X=1`)
		o := shell(e, proc.ShellOptions{Script: []byte(`trap 'echo ignored' INT; while :; do :; done`), Timeout: time.Second})
		if !o.Res.TimedOut || !o.Res.ShellKilled {
			t.Errorf("stuck: %+v %q %q", o.Res, o.Stdout, o.Stderr)
		}
		if o = shellCall(e, "", `echo "${X:-fresh}"`); o.Res.Started != "replaced" || o.Stdout != "fresh\n" {
			t.Errorf("after the kill: %+v %q", o.Res, o.Stdout)
		}
	})
}

// Cancelling a call (Ctrl-C on sbx) interrupts what it runs; the session lives on.
func TestShellCancelInterruptsTheCall(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		shellCall(e, "", `export X=1`)
		res := e.Ensure()
		defer res.Lease.Release()
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		r, err := proc.Shell(ctx, e.M, res.Sandbox, proc.ShellOptions{Script: []byte(`sleep 100`)})
		// sleep 100: ending well before is what the bound checks, not how fast under load.
		if err != nil || !r.Canceled || time.Since(start) > time.Minute {
			t.Fatalf("%+v %v after %s", r, err, time.Since(start))
		}
		if s := e.Leftovers(); s != "" {
			t.Errorf("left running: %q", s)
		}
		if o := shellCall(e, "", `echo $X`); o.Stdout != "1\n" || o.Res.Started != "" {
			t.Errorf("after cancel: %+v %q", o.Res, o.Stdout)
		}
	})
}

// When the OOM killer takes the agent with a call's command (sandbox's
// TestOOMKillOfTheAgentIsReported), the call says so with 137, and the next call has a new
// shell. The agent is the one sbx among the children of the sandbox's init (its spare shim
// is the agent's); the script makes it the kernel's first choice.
func TestShellOOMKillOfTheAgentIsReported(t *testing.T) {
	e := sandboxtest.NewVia(t, true, func(c *config.Config) { c.Memory, c.MemorySwap = 64<<20, 64<<20 })
	if o := shellCall(e, "", "X=1"); o.Res.ExitCode != 0 {
		t.Fatalf("first call: %+v", o.Res)
	}
	res := e.Ensure()
	_, err := proc.Shell(context.Background(), e.M, res.Sandbox, proc.ShellOptions{
		Script: []byte(`for p in $(cat /proc/1/task/1/children); do [ "$(cat /proc/$p/comm)" = sbx ] && echo 1000 >/proc/$p/oom_score_adj; done; python3 -c 'x = bytearray(512 << 20)'`)})
	res.Lease.Release()
	if errs.ExitCode(err) != 137 || err == nil || !strings.Contains(err.Error(), "killed: out of memory, limit 64m; the sandbox stopped with everything in it, its shells too") {
		t.Fatalf("want the call killed for memory with its sandbox: %v", err)
	}
	if o := shellCall(e, "", `echo "${X:-afresh}"`); o.Stdout != "afresh\n" || o.Res.Started != "new" {
		t.Fatalf("the next call: %+v %q", o.Res, o.Stdout)
	}
}
