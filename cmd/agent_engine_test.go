package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-sandbox/sbx/internal/clitest"
)

// These tests drive sbx run, the background-process commands and sbx mcp through the real
// binary against the real engine.

func TestCLIRun(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-run"
	run := func(args ...string) clitest.Result {
		t.Helper()
		return c.Run(append([]string{"run", "-n", name}, args...)...)
	}
	if r := run("--lang", "python", "-c", "print(1)"); r.Code != 0 || r.Stdout != "1\n" {
		t.Fatalf("python: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := run("--lang", "bash", "-c", "echo $BASH_VERSION | cut -c1"); r.Code != 0 || r.Stdout != "5\n" {
		t.Errorf("bash: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := run("--lang", "sh", "-c", "echo out; echo err >&2; exit 3"); r.Code != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("sh: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}

	// Code no shell could pass through quoting unharmed, each case on its own.
	for _, tt := range []struct{ name, lang, code, want string }{
		{"quotes", "python", `print("double \"q\"", 'single \'q\'', """triple""")`, "double \"q\" single 'q' triple\n"},
		{"quotes", "bash", `echo "it's \"quoted\"" '$HOME' "$((6*7))"`, "it's \"quoted\" $HOME 42\n"},
		{"EOF", "bash", "cat <<'EOF'\nline\nEOF\necho EOF\n", "line\nEOF\n"},
		{"EOF", "python", "print('''\nEOF\n''')", "\nEOF\n\n"},
		{"backslashes", "python", `print('a\\b\\\\c', r'\n')`, "a\\b\\\\c \\n\n"},
		{"backslashes", "bash", `printf '%s\n' 'a\b\\c' "\\"`, "a\\b\\\\c\n\\\n"},
		{"non-UTF-8", "bash", "printf '%s' '\xff\xfe\x80'", "\xff\xfe\x80"},
		{"non-UTF-8", "python", "# -*- coding: latin-1 -*-\nimport sys; sys.stdout.buffer.write('\xff\xe9'.encode('latin-1'))", "\xff\xe9"},
	} {
		r := run("--lang", tt.lang, "-c", tt.code)
		if r.Code != 0 || r.Stdout != tt.want {
			t.Errorf("%s in %s: exit %d stdout %q, want %q; stderr %q", tt.name, tt.lang, r.Code, r.Stdout, tt.want, r.Stderr)
		}
	}

	// The same bytes from a file and from stdin; the language follows the file's extension.
	code := "printf '%s|' \"$0\" 'EOF' '\\' \"'\"\nprintf '\\xff\\n'\n"
	c.Write("snippet.sh", code)
	r := run("-f", filepath.Join(c.Project, "snippet.sh"))
	if r.Code != 0 || !strings.HasSuffix(r.Stdout, "|EOF|\\|'|\xff\n") || !strings.HasPrefix(r.Stdout, "/tmp/sbx-run/") {
		t.Errorf("-f: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	cmd := c.Cmd("run", "-n", name, "--lang", "bash", "-")
	cmd.Stdin = strings.NewReader(code)
	if r2 := c.RunIn(cmd); r2.Code != 0 || r2.Stdout[strings.Index(r2.Stdout, "|"):] != r.Stdout[strings.Index(r.Stdout, "|"):] {
		t.Errorf("stdin: exit %d stdout %q stderr %q", r2.Code, r2.Stdout, r2.Stderr)
	}

	r = run("--lang", "bash", "--json", "-c", "echo out; echo err >&2; exit 3")
	var res struct {
		Stdout, Stderr      string
		ExitCode            int
		TimedOut, Truncated bool
		DurationMs          int64
	}
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || r.Code != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 || res.TimedOut || res.Truncated {
		t.Errorf("--json: exit %d %+v %v\n%s", r.Code, res, err, r.Stdout)
	}
	r = run("--lang", "python", "--max-output", "10", "--json", "-c", "print('x' * 100)")
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || !res.Truncated || !strings.HasPrefix(res.Stdout, "xxxxxxxxxx\n[sbx: stdout truncated after 10 bytes; 91 more bytes dropped]") {
		t.Errorf("--max-output --json: %+v %v", res, err)
	}
	r = run("--lang", "python", "--max-output", "10", "-c", "print('x' * 100)")
	if r.Code != 0 || !strings.Contains(r.Stdout, "[sbx: stdout truncated") || !strings.Contains(r.Stderr, "raise --max-output") {
		t.Errorf("--max-output: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = run("--lang", "bash", "--timeout", "1s", "--json", "-c", "sleep 100 & sleep 100")
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || r.Code != 124 || !res.TimedOut || r.Took > 10*time.Second {
		t.Errorf("--timeout --json: exit %d after %s: %+v %v", r.Code, r.Took, res, err)
	}
	if s := c.sleepers(name); s != "" {
		t.Errorf("left running after the timeout:\n%s", s)
	}

	// node, go and java are not in the base image, and the error says where they are.
	r = run("--lang", "node", "-c", "console.log(1)")
	if r.Code != 127 || !strings.Contains(r.Stderr, "needs node, which image sbx-sandbox") || !strings.Contains(r.Stderr, "hint: node needs the common profile") {
		t.Errorf("node in the base image: exit %d stderr %q", r.Code, r.Stderr)
	}
	if r := run("--lang", "cobol", "-c", "x"); r.Code != 2 {
		t.Errorf("unknown language: exit %d %q", r.Code, r.Stderr)
	}
	// Every run cleaned up after itself, the timed-out one included.
	if r := c.Run("exec", "-n", name, "--", "find", "/tmp/sbx-run", "-mindepth", "1"); r.Stdout != "" {
		t.Errorf("left in /tmp/sbx-run:\n%s", r.Stdout)
	}
}

func TestCLIRunCommonProfile(t *testing.T) {
	c := newCLI(t)
	c.Write(".sbx.yaml", "profile: common\n")
	for _, tt := range []struct{ lang, code, want string }{
		{"node", "console.log(`node ${'\"q\"'} \\\\ EOF`)", "node \"q\" \\ EOF\n"},
		{"go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"go \\\"q\\\" \\\\ EOF\") }\n", "go \"q\" \\ EOF\n"},
		{"java", "class Helper {}\npublic class Hello {\n  public static void main(String[] a) { System.out.println(\"java \\\"q\\\" \\\\ EOF\"); }\n}\n", "java \"q\" \\ EOF\n"},
	} {
		r := c.Run("run", "--lang", tt.lang, "--timeout", "3m", "-c", tt.code)
		if r.Code != 0 || r.Stdout != tt.want {
			t.Errorf("%s: exit %d stdout %q, want %q; stderr %s", tt.lang, r.Code, r.Stdout, tt.want, r.Stderr)
		}
	}
}

func TestCLIBackgroundProcesses(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-bg"
	// An http.server and a sleeper, both children of the detached bash.
	r := c.Run("exec", "-n", name, "-d", "--", "bash", "-c", "python3 -u -m http.server --bind 127.0.0.1 8765 & sleep 1000 & wait")
	id := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || len(id) != 6 || !strings.Contains(r.Stderr, "sbx logs -n "+name+" "+id) {
		t.Fatalf("exec -d: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	// The sbx that started it has exited; a new one fetches a page and sees the process. The
	// deadline only fails a server that never answers.
	var page clitest.Result
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		if page = c.Run("exec", "-n", name, "--", "curl", "-sf", "http://127.0.0.1:8765/"); page.Code == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if page.Code != 0 || !strings.Contains(page.Stdout, "Directory listing") {
		t.Fatalf("the server does not answer: %d %q %q", page.Code, page.Stdout, page.Stderr)
	}
	r = c.Run("ps", "-n", name)
	if r.Code != 0 || !strings.Contains(r.Stdout, id+"\tbash -c 'python3 -u -m http.server") || !strings.Contains(r.Stdout, "\trunning\t") {
		t.Errorf("ps: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = c.Run("logs", "-n", name, id)
	if r.Code != 0 || !strings.Contains(r.Stdout, "Serving HTTP on 127.0.0.1 port 8765") || !strings.Contains(r.Stderr, `"GET / HTTP/1.1" 200`) {
		t.Errorf("logs: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := c.Run("logs", "-n", name, "--tail", "1", id); !strings.HasPrefix(r.Stdout, "Serving") || strings.Count(r.Stderr, "\n") != 1 {
		t.Errorf("logs --tail 1: stdout %q stderr %q", r.Stdout, r.Stderr)
	}

	r = c.Run("kill", "-n", name, id)
	if r.Code != 0 || !strings.Contains(r.Stderr, "sent TERM to process "+id+": exited with code 143") {
		t.Errorf("kill: exit %d stderr %q", r.Code, r.Stderr)
	}
	// The group got TERM with its main process; on a busy machine the others may take a
	// moment to die. The deadline only fails processes that are never ended.
	var left clitest.Result
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if left = c.Run("exec", "-n", name, "--", "pgrep", "-af", "http.server|sleep 1000"); left.Stdout == "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if left.Stdout != "" {
		t.Errorf("left running a minute after kill: %q", left.Stdout)
	}
	var ps []struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		ExitCode *int   `json:"exitCode"`
		TimedOut bool   `json:"timedOut"`
	}
	r = c.Run("ps", "-n", name, "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &ps); err != nil || len(ps) != 1 || ps[0].State != "exited" || ps[0].ExitCode == nil || *ps[0].ExitCode != 143 {
		t.Errorf("ps after kill: %v %s", err, r.Stdout)
	}
	if r := c.Run("logs", "-n", name, id); !strings.Contains(r.Stdout, "Serving HTTP") {
		t.Errorf("the output is gone after the process ended: %q", r.Stdout)
	}
	if r := c.Run("kill", "-n", name, id); r.Code != 1 || !strings.Contains(r.Stderr, "already exited") {
		t.Errorf("kill of an exited process: exit %d %q", r.Code, r.Stderr)
	}

	// logs -f follows until the process exits; a --timeout ends a process that overstays.
	id = strings.TrimSpace(c.Run("exec", "-n", name, "-d", "--", "sh", "-c", "for i in 1 2 3; do echo out $i; echo err $i >&2; sleep 0.3; done; exit 4").Stdout)
	r = c.Run("logs", "-n", name, "-f", id)
	if r.Code != 0 || r.Stdout != "out 1\nout 2\nout 3\n" || !strings.HasPrefix(r.Stderr, "err 1\nerr 2\nerr 3\n") || !strings.Contains(r.Stderr, "exited with code 4") {
		t.Errorf("logs -f: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	id = strings.TrimSpace(c.Run("exec", "-n", name, "-d", "--timeout", "1s", "--", "sleep", "100").Stdout)
	waitExited(t, c, name, id)
	r = c.Run("ps", "-n", name)
	if !strings.Contains(r.Stdout, id+"\tsleep 100\ttimed out (143)") {
		t.Errorf("ps after --timeout: %q", r.Stdout)
	}

	// Output beyond the cap drops the oldest first.
	id = strings.TrimSpace(c.Run("exec", "-n", name, "-d", "--", "python3", "-c", "for i in range(200000): print('line %07d' % i)").Stdout)
	waitExited(t, c, name, id)
	r = c.Run("logs", "-n", name, id)
	if n := len(r.Stdout); n < 768<<10 || n > 1<<20 || !strings.HasSuffix(r.Stdout, "line 0199999\n") || !strings.Contains(r.Stderr, "bytes of its stdout were dropped") {
		t.Errorf("capped logs: %d bytes, ending %q, stderr %q", n, r.Stdout[max(0, n-20):], r.Stderr)
	}

	if r := c.Run("exec", "-n", name, "-d", "--", "no-such-command"); r.Code != 127 || !strings.Contains(r.Stderr, "command not found") {
		t.Errorf("exec -d of a missing command: exit %d %q", r.Code, r.Stderr)
	}
	if r := c.Run("logs", "-n", name, "ffffff"); r.Code != 1 || !strings.Contains(r.Stderr, `no process "ffffff"`) || !strings.Contains(r.Stderr, "hint: list them with") {
		t.Errorf("logs of an unknown ID: exit %d %q", r.Code, r.Stderr)
	}
	if r := c.Run("exec", "-n", name, "-d", "-i", "--", "true"); r.Code != 2 {
		t.Errorf("-d -i: exit %d %q", r.Code, r.Stderr)
	}
}

// waitExited waits until background process id of sandbox name has exited; the deadline only
// fails a process that never does.
func waitExited(t *testing.T, c *cli, name, id string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		var ps []struct{ ID, State string }
		if err := json.Unmarshal([]byte(c.Run("ps", "-n", name, "--json").Stdout), &ps); err == nil {
			for _, p := range ps {
				if p.ID == id && p.State == "exited" {
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("process %s never exited", id)
}

// mcpSession starts "sbx mcp" in dir (a project) and connects the SDK's client to it.
func (c *cli) mcpSession(dir string, args ...string) *mcp.ClientSession {
	c.T.Helper()
	cmd := exec.Command(c.Bin, append([]string{"mcp"}, args...)...)
	var stderr bytes.Buffer
	cmd.Dir, cmd.Env, cmd.Stderr = dir, c.Env, &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sbx-test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		c.T.Fatalf("connecting to sbx mcp: %v\n%s", err, stderr.String())
	}
	c.T.Cleanup(func() {
		if err := cs.Close(); err != nil {
			c.T.Errorf("sbx mcp did not end cleanly: %v", err)
		}
		if c.T.Failed() {
			c.T.Logf("sbx mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if out != nil && !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %v in %s", tool, err, raw)
		}
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestCLIMCP(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-mcp"
	cs := c.mcpSession(c.Project, "-n", name)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Name == "exec" && !strings.Contains(tool.Description, "no network access") {
			t.Errorf("exec's description lacks the limits: %s", tool.Description)
		}
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "exec") || !strings.Contains(got, "write_file") || !strings.Contains(got, "process_output") {
		t.Errorf("tools: %s", got)
	}

	type execOut struct {
		Stdout, Stderr                 string
		ExitCode                       int
		TimedOut, Truncated, OOMKilled bool
	}
	var eo execOut
	res := mcpCall(t, cs, "exec", map[string]any{"command": `echo "$X" from $(pwd); echo err >&2; cat; exit 3`, "env": map[string]any{"X": "hi"}, "stdin": "in\n"}, &eo)
	if res.IsError || eo.Stdout != "hi from /workspace\nin\n" || eo.Stderr != "err\n" || eo.ExitCode != 3 || eo.TimedOut {
		t.Errorf("exec: %+v %s", eo, resultText(res))
	}
	res = mcpCall(t, cs, "exec", map[string]any{"command": "sleep 30 & sleep 30", "timeoutSeconds": 1}, &eo)
	if res.IsError || !eo.TimedOut {
		t.Errorf("exec past its timeout: %+v %s", eo, resultText(res))
	}
	if s := c.sleepers(name); s != "" {
		t.Errorf("left running after the timeout:\n%s", s)
	}
	res = mcpCall(t, cs, "run", map[string]any{"language": "python", "code": "print('py', \"\\\\\")"}, &eo)
	if res.IsError || eo.Stdout != "py \\\n" {
		t.Errorf("run: %+v %s", eo, resultText(res))
	}

	var wo struct {
		Path  string
		Bytes int64
	}
	res = mcpCall(t, cs, "write_file", map[string]any{"path": "/tmp/notes/a.txt", "content": "first\nsecond\n", "createDirs": true}, &wo)
	if res.IsError || wo.Path != "/tmp/notes/a.txt" || wo.Bytes != 13 {
		t.Fatalf("write_file: %+v %s", wo, resultText(res))
	}
	var ro struct {
		Content, Encoding string
		Size, Bytes       int64
		More              bool
	}
	res = mcpCall(t, cs, "read_file", map[string]any{"path": "/tmp/notes/a.txt"}, &ro)
	if res.IsError || ro.Content != "first\nsecond\n" || ro.Encoding != "utf-8" || ro.Size != 13 || ro.More {
		t.Errorf("read_file: %+v %s", ro, resultText(res))
	}
	res = mcpCall(t, cs, "read_file", map[string]any{"path": "/tmp/notes/a.txt", "offset": 6, "limit": 3}, &ro)
	if res.IsError || ro.Content != "sec" || !ro.More {
		t.Errorf("read_file with offset and limit: %+v %s", ro, resultText(res))
	}
	if res = mcpCall(t, cs, "write_file", map[string]any{"path": "/tmp/notes/bin", "content": "/w8A", "encoding": "base64"}, nil); res.IsError {
		t.Errorf("binary write_file: %s", resultText(res))
	}
	if res = mcpCall(t, cs, "read_file", map[string]any{"path": "/tmp/notes/bin"}, &ro); ro.Encoding != "base64" || ro.Content != "/w8A" {
		t.Errorf("binary read_file: %+v %s", ro, resultText(res))
	}
	var lo struct {
		Entries []struct {
			Path, Type string
			Size       int64
		}
	}
	if res = mcpCall(t, cs, "list_files", map[string]any{"path": "/tmp/notes"}, &lo); res.IsError || len(lo.Entries) != 2 || lo.Entries[0].Path != "a.txt" || lo.Entries[0].Size != 13 {
		t.Errorf("list_files: %+v %s", lo, resultText(res))
	}
	// The workspace is read-only by default, and the agent is told why a write fails.
	if res = mcpCall(t, cs, "write_file", map[string]any{"path": "x.txt", "content": "x"}, nil); !res.IsError || !strings.Contains(resultText(res), "Read-only file system") {
		t.Errorf("write into the read-only workspace: %v %s", res.IsError, resultText(res))
	}
	if res = mcpCall(t, cs, "read_file", map[string]any{"path": "/nonexistent"}, nil); !res.IsError || !strings.Contains(resultText(res), "no such file: /nonexistent") {
		t.Errorf("read_file of a missing file: %s", resultText(res))
	}

	var po struct {
		ID, State string
		ExitCode  *int
		Stdout    string
	}
	if res = mcpCall(t, cs, "start_process", map[string]any{"command": "echo started; sleep 1000"}, &po); res.IsError || po.State != "running" {
		t.Fatalf("start_process: %+v %s", po, resultText(res))
	}
	id := po.ID
	// The deadline only fails a process that never prints.
	for deadline := time.Now().Add(time.Minute); ; {
		res = mcpCall(t, cs, "process_output", map[string]any{"id": id}, &po)
		if res.IsError || po.Stdout != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.IsError || po.Stdout != "started\n" || po.State != "running" {
		t.Errorf("process_output: %+v %s", po, resultText(res))
	}
	if res = mcpCall(t, cs, "kill_process", map[string]any{"id": id}, &po); res.IsError || po.State != "exited" || po.ExitCode == nil || *po.ExitCode != 143 {
		t.Errorf("kill_process: %+v %s", po, resultText(res))
	}

	// A project that denies write: the tool is listed, its calls fail with the reason.
	denied := filepath.Join(c.Project, "denied")
	c.Write("denied/.sbx.yaml", "tools:\n  deny: [write]\n")
	ds := c.mcpSession(denied, "-n", cliRun+"-mcpdeny")
	res = mcpCall(t, ds, "write_file", map[string]any{"path": "/tmp/x", "content": "x"}, nil)
	if !res.IsError || !strings.Contains(resultText(res), `tool "write" is denied by "write" in tools.deny`) {
		t.Errorf("denied write_file: %v %s", res.IsError, resultText(res))
	}
	if res = mcpCall(t, ds, "list_files", map[string]any{"path": "/"}, nil); res.IsError {
		t.Errorf("read is still allowed: %s", resultText(res))
	}
}
