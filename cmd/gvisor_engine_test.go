package cmd

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// hostRelease is uname -r of the machine the tests run on, which the engine's kernel is.
func hostRelease(t *testing.T) string {
	t.Helper()
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// A sandbox with isolation: gvisor runs under sbx's runsc registration and answers with
// gVisor's kernel, and everything a user does in a sandbox works there as in a container,
// through sbx's agent, which binds its own socket there: exec with its exit status and
// streams, -i, -t, the timeout, cp both ways, shell sessions, background processes, run,
// port forwarding, egress and --rm; the engine runs no exec for any of it. make test
// registers the runtime (scripts/test-env.sh), so a missing one fails here instead of
// skipping.
func TestCLIGVisor(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-gv"
	if r := c.Run("create", "-n", name, "--isolation", "gvisor"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	ctr, err := c.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	if ctr.HostConfig.Runtime != config.GVisorRuntime || ctr.Config.Labels[sandbox.LabelAgent] != agent.Version() {
		t.Fatalf("runtime %q, agent %q", ctr.HostConfig.Runtime, ctr.Config.Labels[sandbox.LabelAgent])
	}
	exec := func(args ...string) (string, string, int) {
		t.Helper()
		r := c.Run(append([]string{"exec", "-n", name}, args...)...)
		return r.Stdout, r.Stderr, r.Code
	}
	// Sessions and background processes leave the agent's tree by design, so for them, and
	// for cp, only the engine's count tells; -u takes the engine's exec, which it must see.
	since := time.Now()
	t.Cleanup(func() {
		if n := execsSince(t, ctr.ID, since); n != 0 {
			t.Errorf("the engine ran %d execs in the gVisor sandbox: some command did not go through the agent", n)
		}
		before := time.Now()
		if _, errOut, code := exec("-u", "0:0", "--", "true"); code != 0 {
			t.Fatalf("exec -u 0:0: exit %d %q", code, errOut)
		}
		if n := execsSince(t, ctr.ID, before); n == 0 {
			t.Error("the engine's exec of exec -u was not counted: the count proves nothing")
		}
	})

	t.Run("kernel", func(t *testing.T) {
		host := hostRelease(t)
		out, _, code := exec("--", "uname", "-r")
		if code != 0 || strings.TrimSpace(out) == "" || strings.TrimSpace(out) == host {
			t.Errorf("uname -r: %q (exit %d); the host's is %q", out, code, host)
		}
		// The kernel's log is refused by the sandbox's seccomp filter (syslog), as in a
		// container: the agent's commands run under it, runsc exec's did not.
		if out, errOut, code := exec("--", "dmesg"); code == 0 || !strings.Contains(errOut, "Operation not permitted") {
			t.Errorf("dmesg through the agent: exit %d %.300q %q", code, out, errOut)
		}
	})
	t.Run("exec", func(t *testing.T) {
		out, errOut, code := exec("--", "bash", "-c", "id -u; echo to-stderr >&2; exit 7")
		if code != 7 || out != "1000\n" || errOut != "to-stderr\n" {
			t.Errorf("exit %d stdout %q stderr %q", code, out, errOut)
		}
		// The command's parent is the agent, and it runs under the sandbox's seccomp filter
		// (the engine's exec into runsc starts commands without it).
		r := c.Run("exec", "-n", name, "--debug", "--", "sh", "-c", `tr '\0' ' ' </proc/$PPID/cmdline; echo; grep Seccomp: /proc/self/status`)
		if r.Code != 0 || !strings.HasPrefix(r.Stdout, sandbox.AgentBinaryPath+" __agent --own-socket "+sandbox.AgentMountPath+" ") ||
			!strings.Contains(r.Stdout, "Seccomp:\t2\n") || strings.Contains(r.Stderr, "engine's exec") {
			t.Errorf("not run by the agent: %s", r)
		}
		if r := c.Run("explain", name); r.Code != 0 || !strings.Contains(r.Stdout, "commands: through sbx's agent") {
			t.Errorf("explain does not say commands go through the agent: %s", r)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		cmd := c.Cmd("exec", "-n", name, "-i", "--", "sh", "-c", "wc -c; cat /dev/null")
		cmd.Stdin = strings.NewReader(strings.Repeat("x", 100000))
		if r := c.RunIn(cmd); r.Code != 0 || strings.TrimSpace(r.Stdout) != "100000" {
			t.Errorf("-i: %s", r)
		}
	})
	t.Run("tty", func(t *testing.T) {
		// The agent makes the terminal inside, gVisor's own, with the size it was asked for.
		cmd := c.Cmd("exec", "-n", name, "-i", "-t", "--", "sh", "-c", "tty; stty size")
		term := c.StartOnTerminal(cmd, 33, 101)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("-t: %v\n%q", err, term.Output())
		}
		if out := term.Closed(); !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "33 101") {
			t.Errorf("-i -t: no terminal of the right size inside: %q", out)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		r := c.Run("exec", "-n", name, "--timeout", "2s", "--", "sh", "-c", "sleep 300 & sleep 301")
		if r.Code != 124 || !strings.Contains(r.Stderr, "timed out after 2s") {
			t.Fatalf("timeout: %s", r)
		}
		if left := c.sleepers(name); left != "" {
			t.Errorf("the timed-out command left %q", left)
		}
	})
	t.Run("cp", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "in")
		if err := os.MkdirAll(filepath.Join(src, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "d", "f"), []byte("payload\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := c.Run("cp", src, name+":/tmp/in"); r.Code != 0 {
			t.Fatalf("cp in: %s", r)
		}
		if out, _, code := exec("--", "sh", "-c", "cat /tmp/in/d/f; echo back > /tmp/in/d/g"); code != 0 || out != "payload\n" {
			t.Fatalf("copied in: exit %d %q", code, out)
		}
		dst := filepath.Join(t.TempDir(), "out")
		if r := c.Run("cp", name+":/tmp/in", dst); r.Code != 0 {
			t.Fatalf("cp out: %s", r)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "d", "g")); err != nil || string(b) != "back\n" {
			t.Errorf("copied out: %q %v", b, err)
		}
	})
	t.Run("sh", func(t *testing.T) {
		sh := func(args ...string) (string, string, int) {
			t.Helper()
			r := c.Run(append([]string{"sh", "-n", name}, args...)...)
			return r.Stdout, r.Stderr, r.Code
		}
		if _, errOut, code := sh("-c", "cd /tmp && export X=1"); code != 0 {
			t.Fatalf("first call: exit %d %q", code, errOut)
		}
		if out, errOut, code := sh("-c", "pwd; echo $X; echo e >&2; return 3"); code != 3 || out != "/tmp\n1\n" || errOut != "e\n" {
			t.Errorf("state: exit %d stdout %q stderr %q", code, out, errOut)
		}
		if out, _, code := sh("--timeout", "1s", "-c", "sleep 300; echo not-here"); code != 124 || strings.Contains(out, "not-here") {
			t.Errorf("timeout: exit %d %q", code, out)
		}
		if out, _, code := sh("-c", "echo $X"); code != 0 || out != "1\n" {
			t.Errorf("the session did not survive its timeout: exit %d %q", code, out)
		}
		if out, _, code := sh("--list"); code != 0 || !strings.Contains(out, "default\tidle") {
			t.Errorf("--list: exit %d %q", code, out)
		}
	})
	t.Run("background", func(t *testing.T) {
		// More than a chunk of the output ring, so its rotation (which takes sizes with wc)
		// is exercised; logs -f returns when the process has exited and all is shown.
		r := c.Run("exec", "-n", name, "-d", "--", "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' a; echo; echo end")
		id := strings.TrimSpace(r.Stdout)
		if r.Code != 0 || id == "" {
			t.Fatalf("exec -d: %s", r)
		}
		if r := c.Run("logs", "-n", name, id, "-f"); r.Code != 0 || len(r.Stdout) != 300005 || !strings.HasSuffix(r.Stdout, "a\nend\n") {
			t.Errorf("logs -f: exit %d, %d bytes, ending %q", r.Code, len(r.Stdout), r.Stdout[max(0, len(r.Stdout)-10):])
		}
		r = c.Run("exec", "-n", name, "-d", "--", "sleep", "300")
		id = strings.TrimSpace(r.Stdout)
		if r := c.Run("ps", "-n", name); r.Code != 0 || !strings.Contains(r.Stdout, id+"\tsleep 300\trunning") {
			t.Errorf("ps: %s", r)
		}
		if r := c.Run("kill", "-n", name, id); r.Code != 0 {
			t.Errorf("kill: %s", r)
		}
		if r := c.Run("ps", "-n", name); !strings.Contains(r.Stdout, id+"\tsleep 300\texited (143)") {
			t.Errorf("ps after kill: %s", r)
		}
	})
	t.Run("run", func(t *testing.T) {
		if r := c.Run("run", "-n", name, "--lang", "python", "-c", "import os; print(6*7, os.uname().release)"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "42 ") || strings.Contains(r.Stdout, hostRelease(t)) {
			t.Errorf("run: %s", r)
		}
	})
	t.Run("port-forward", func(t *testing.T) {
		if _, errOut, code := exec("--", "sh", "-c", "echo hello > /tmp/hello.txt"); code != 0 {
			t.Fatalf("exec: exit %d %q", code, errOut)
		}
		r := c.Run("exec", "-n", name, "-d", "--wait-port", "8000", "--wait-timeout", "60s", "--", "python3", "-m", "http.server", "-b", "127.0.0.1", "-d", "/tmp", "8000")
		if r.Code != 0 || !strings.Contains(r.Stderr, "waiting for port 8000") {
			t.Fatalf("exec -d --wait-port: %s", r)
		}
		f := c.portForward("-n", name, "0:8000")
		line, err := f.stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the URL: %v (stderr %s)", err, f.stderr.String())
		}
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 60 * time.Second}
		if body, err := get(client, strings.TrimSpace(line)+"/hello.txt"); err != nil || body != "hello\n" {
			t.Errorf("through the forward: %q %v", body, err)
		}
		if err := f.cmd.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if r := <-f.done; r.Code != 0 {
			t.Errorf("port-forward after SIGINT: %s", r)
		}
	})
	t.Run("egress", func(t *testing.T) {
		// The proxy's own decision, with nothing sent anywhere: 192.0.2.1 is a documentation
		// address the rule allows, and a name the rules do not allow is refused by name.
		en := cliRun + "-gve"
		if r := c.Run("create", "-n", en, "--isolation", "gvisor", "--egress", "192.0.2.1:9"); r.Code != 0 {
			t.Fatalf("create: %s", r)
		}
		r := c.Run("exec", "-n", en, "--", "bash", "-c", `curl -sS -o /dev/null -w '%{http_code}\n' http://registry.npmjs.org/; (exec 3<>/dev/tcp/203.0.113.80/80) 2>&1 | tail -1`)
		if !strings.HasPrefix(r.Stdout, "403\n") || !strings.Contains(r.Stdout, "unreachable") && !strings.Contains(r.Stdout, "No route to host") {
			t.Errorf("egress under gVisor: %s", r)
		}
	})
	t.Run("oom", func(t *testing.T) {
		// gVisor has no memory.events for the agent to read: the OOM killer ends the whole
		// sandbox (the Sentry holds the memory), which sbx learns at once from the agent's
		// connection and the engine's OOM flag.
		on := cliRun + "-gvo"
		if r := c.Run("create", "-n", on, "--isolation", "gvisor", "--memory", "256m"); r.Code != 0 {
			t.Fatalf("create: %s", r)
		}
		r := c.Run("exec", "-n", on, "--", "python3", "-c", "a = bytearray(1 << 30); print(len(a))")
		if r.Code != 137 || !strings.Contains(r.Stderr, "killed: out of memory, limit 256m; the sandbox stopped with everything in it") || !strings.Contains(r.Stderr, "hint: raise memory") {
			t.Errorf("a memory bomb under gVisor: %s", r)
		}
		if r := c.Run("exec", "-n", on, "--", "echo", "again"); r.Code != 0 || r.Stdout != "again\n" {
			t.Errorf("the next command does not start the sandbox again: %s", r)
		}
	})
}

// --rm and a project file under gVisor: a project may ask for gVisor without being trusted,
// the throwaway sandbox runs under it and leaves nothing; a project that asks for less than
// the user's gVisor is refused, as is idleStop, whose lock gVisor cannot see.
func TestCLIGVisorConfig(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "isolation: gvisor\n")
	r := c.Run("exec", "--rm", "--", "uname", "-r")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) == hostRelease(t) {
		t.Fatalf("exec --rm under gVisor: %s", r)
	}
	if left := c.remains(throwawayName(t, r.Stderr)); len(left) > 0 {
		t.Errorf("--rm left %v", left)
	}

	c.Write(".sbx.yaml", "isolation: container\n")
	userFile := filepath.Join(c.Home, ".config", "sbx", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(userFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(userFile, []byte("isolation: gvisor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.Run("exec", "--", "true"); r.Code != 125 || !strings.Contains(r.Stderr, "isolation") || !strings.Contains(r.Stderr, "sbx trust") {
		t.Errorf("a project below the user's gVisor: %s", r)
	}
	if r := c.Run("create", "-n", cliRun+"-gvi", "--isolation", "gvisor", "--idle-stop", "1m"); r.Code != 125 || !strings.Contains(r.Stderr, "gVisor keeps file locks to itself") {
		t.Errorf("idleStop under gVisor: %s", r)
	}
}

// A gVisor sandbox's agent binds its socket in a directory of the host user's state, whoever
// that is: for sbx run by a user who is not root (nor the sandbox's uid) the socket still
// lets it in (0666, made by the sandbox's uid), the directory is open to the sandbox (0777)
// under a private parent (0700), and the next start empties it of what the sandbox left
// there and the agent binds again.
func TestCLIGVisorAgentOfAnotherUser(t *testing.T) {
	c := newCLIAs(t, nonRootUID)
	name := cliRun + "-gvu"
	if r := c.Run("create", "-n", name, "--isolation", "gvisor"); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	dir := c.agentDir(name)
	for i, when := range []string{"first start", "after a restart"} {
		r := c.Run("exec", "-n", name, "--debug", "--", "sh", "-c", `tr '\0' ' ' </proc/$PPID/cmdline; echo left > /run/sbx-agent/left.`+strconv.Itoa(i))
		if r.Code != 0 || !strings.Contains(r.Stdout, " __agent --own-socket ") || strings.Contains(r.Stderr, "engine's exec") {
			t.Errorf("%s: not through the agent: %s", when, r)
		}
		want := map[string]os.FileMode{filepath.Dir(dir): 0o700 | os.ModeDir, dir: 0o777 | os.ModeDir, filepath.Join(dir, "agent.sock"): 0o666 | os.ModeSocket}
		for path, mode := range want {
			if fi, err := os.Lstat(path); err != nil || fi.Mode() != mode {
				t.Errorf("%s: %s: %v %v, want %s", when, path, fi, err, mode)
			}
		}
		if fi, err := os.Lstat(filepath.Join(dir, "agent.sock")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
			t.Errorf("%s: agent.sock is not the sandbox user's: %v %v", when, fi, err)
		}
		if r := c.Run("stop", name); r.Code != 0 {
			t.Fatalf("stop: %s", r)
		}
	}
	// The restart emptied the directory of what the first run left.
	var names []string
	entries, err := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if err != nil || !slices.Equal(names, []string{"agent.sock", "left.1"}) {
		t.Errorf("after the second run the directory holds %q %v, want agent.sock and left.1", names, err)
	}
}
