package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// connect serves New(opts) over an in-memory transport and returns a client session. The
// sandbox function fails the test when called, unless the test sets its own.
func connect(t *testing.T, r *config.Resolved, sb func(context.Context) (*sandbox.Manager, *sandbox.Sandbox, func(), error)) *mcp.ClientSession {
	t.Helper()
	if sb == nil {
		sb = func(context.Context) (*sandbox.Manager, *sandbox.Sandbox, func(), error) {
			t.Error("the sandbox was needed, but the call should have failed before")
			return nil, nil, nil, errors.New("no sandbox in this test")
		}
	}
	return connectServer(t, New(Options{Resolved: r, Sandbox: sb, Version: "test"}))
}

// connectServer serves srv over an in-memory transport and returns a client session.
func connectServer(t *testing.T, srv *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	return cs
}

func resolved(mutate func(*config.Config)) *config.Resolved {
	c := config.Defaults()
	c.Image = "sbx-sandbox:test"
	if mutate != nil {
		mutate(&c)
	}
	return &config.Resolved{Name: "agent", Config: c, Sources: map[string]config.Source{}}
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", tool, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsListAndDescriptions(t *testing.T) {
	cs := connect(t, resolved(func(c *config.Config) { c.Tools.Deny = append(c.Tools.Deny, "write") }), nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	desc := map[string]string{}
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		desc[tool.Name] = tool.Description
	}
	want := []string{"exec", "shell", "run", "read_file", "write_file", "list_files", "start_process", "list_processes", "process_output", "kill_process", "explain"}
	for _, n := range want {
		if !slices.Contains(names, n) {
			t.Errorf("tool %s missing from %v", n, names)
		}
	}
	for _, s := range []string{"no network access", "read-only at /workspace", "memory 1g", "at most 256 processes", "time out after 10m"} {
		if !strings.Contains(desc["exec"], s) {
			t.Errorf("exec's description lacks %q:\n%s", s, desc["exec"])
		}
	}
	if !strings.HasPrefix(desc["write_file"], "DENIED by the tool policy") || strings.Contains(desc["read_file"], "DENIED") {
		t.Errorf("policy in descriptions:\nwrite_file: %s\nread_file: %s", desc["write_file"], desc["read_file"])
	}
	if init := cs.InitializeResult(); !strings.Contains(init.Instructions, "no network access") {
		t.Errorf("instructions: %s", init.Instructions)
	}
}

func TestDescriptionsFollowTheConfig(t *testing.T) {
	cs := connect(t, resolved(func(c *config.Config) {
		c.Network, c.Workspace, c.Memory, c.Timeout = "bridge", config.WorkspaceRW, 2<<30, 0
	}), nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Tools[slices.IndexFunc(res.Tools, func(t *mcp.Tool) bool { return t.Name == "exec" })].Description
	for _, s := range []string{"network access through the bridge", "read-write at /workspace", "memory 2g"} {
		if !strings.Contains(d, s) {
			t.Errorf("description lacks %q:\n%s", s, d)
		}
	}
	if strings.Contains(d, "time out") {
		t.Errorf("no timeout configured, yet: %s", d)
	}
}

func TestPolicyDenialIsAnErrorResult(t *testing.T) {
	cs := connect(t, resolved(func(c *config.Config) { c.Tools.Deny = []string{"write", "exec"} }), nil)
	for tool, args := range map[string]any{
		"write_file":    map[string]any{"path": "x", "content": "y"},
		"exec":          map[string]any{"command": "true"},
		"run":           map[string]any{"language": "python", "code": "print(1)"},
		"start_process": map[string]any{"command": "sleep 1"},
		"shell":         map[string]any{"command": "cd /tmp"},
	} {
		res := call(t, cs, tool, args)
		if !res.IsError || !strings.Contains(text(res), "denied by") || !strings.Contains(text(res), "hint:") {
			t.Errorf("%s: error %v, %q", tool, res.IsError, text(res))
		}
	}
	// explain is never gated: it is how an agent learns the policy.
	res := call(t, cs, "explain", map[string]any{})
	if res.IsError {
		t.Fatalf("explain: %s", text(res))
	}
	var rep struct {
		Tools struct {
			Decisions []struct {
				Tool    string `json:"tool"`
				Allowed bool   `json:"allowed"`
			} `json:"decisions"`
		} `json:"tools"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &rep); err != nil || len(rep.Tools.Decisions) == 0 {
		t.Fatalf("explain output: %v %s", err, raw)
	}
	allowed := map[string]bool{}
	for _, d := range rep.Tools.Decisions {
		allowed[d.Tool] = d.Allowed
	}
	if allowed["write"] || allowed["exec"] || !allowed["read"] {
		t.Errorf("decisions %v", allowed)
	}
}

func TestBadArgumentsAreErrorResults(t *testing.T) {
	cs := connect(t, resolved(nil), nil)
	for _, tt := range []struct {
		tool string
		args any
		want string
	}{
		{"exec", map[string]any{}, "command"},
		{"exec", map[string]any{"command": "  "}, "command is required"},
		{"exec", map[string]any{"command": "true", "timeoutSeconds": 3600}, "above this sandbox's limit of 10m"},
		{"exec", map[string]any{"command": "true", "timeoutSeconds": -1}, "negative"},
		{"exec", map[string]any{"command": "true", "env": map[string]any{"A=B": "x"}}, "bad environment variable"},
		{"exec", map[string]any{"command": "true", "maxOutputBytes": 1 << 30}, "maxOutputBytes"},
		{"exec", map[string]any{"command": 42}, "command"},
		{"run", map[string]any{"language": "cobol", "code": "x"}, "unknown language"},
		{"run", map[string]any{"language": "java", "code": "int x;"}, "no class found"},
		{"read_file", map[string]any{"path": ""}, "path is required"},
		{"read_file", map[string]any{"path": "x", "limit": 1 << 30}, "limit must be"},
		{"read_file", map[string]any{"path": "x", "offset": -5}, "offset"},
		{"write_file", map[string]any{"path": "dir/", "content": ""}, "names a directory"},
		{"write_file", map[string]any{"path": "x", "content": "!!", "encoding": "base64"}, "not valid base64"},
		{"write_file", map[string]any{"path": "x", "content": "", "encoding": "rot13"}, "unknown encoding"},
		{"list_files", map[string]any{"depth": 99}, "depth must be"},
		{"process_output", map[string]any{"id": "../etc"}, "bad process ID"},
		{"kill_process", map[string]any{"id": "abc", "signal": "NOPE"}, "unknown signal"},
		{"start_process", map[string]any{"command": ""}, "command is required"},
		{"shell", map[string]any{"command": " "}, "command is required"},
		{"shell", map[string]any{"command": "pwd", "session": "../x"}, "bad session name"},
		{"shell", map[string]any{"command": "pwd", "timeoutSeconds": 3600}, "above this sandbox's limit"},
	} {
		res := call(t, cs, tt.tool, tt.args)
		if !res.IsError || !strings.Contains(text(res), tt.want) {
			t.Errorf("%s %v: error %v, %q, want %q", tt.tool, tt.args, res.IsError, text(res), tt.want)
		}
	}
}

func TestHandlerPanicBecomesAnError(t *testing.T) {
	cs := connect(t, resolved(nil), func(context.Context) (*sandbox.Manager, *sandbox.Sandbox, func(), error) {
		panic("boom")
	})
	res := call(t, cs, "exec", map[string]any{"command": "true"})
	if !res.IsError || !strings.Contains(text(res), "internal error in tool exec: boom") {
		t.Errorf("%v %q", res.IsError, text(res))
	}
	// The server still answers.
	if res := call(t, cs, "explain", map[string]any{}); res.IsError {
		t.Errorf("after a panic: %s", text(res))
	}
}

func TestTimeout(t *testing.T) {
	s := &server{Options: Options{Resolved: resolved(nil)}}
	for _, tt := range []struct {
		in   float64
		want time.Duration
		err  bool
	}{
		{0, 10 * time.Minute, false},
		{1.5, 1500 * time.Millisecond, false},
		{600, 10 * time.Minute, false},
		{601, 0, true},
		{-1, 0, true},
	} {
		got, err := s.timeout(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("timeout(%g) = %s, %v", tt.in, got, err)
		}
	}
	s.Resolved.Config.Timeout = 0
	if got, err := s.timeout(7200); got != 2*time.Hour || err != nil {
		t.Errorf("no configured limit: %s %v", got, err)
	}
}

func TestResolvePath(t *testing.T) {
	s := &server{Options: Options{WorkDir: "/workspace/src"}}
	for in, want := range map[string]string{"a.txt": "/workspace/src/a.txt", "../b": "/workspace/b", "/tmp//x/": "/tmp/x", "/../..": "/"} {
		if got, err := s.resolvePath(in); got != want || err != nil {
			t.Errorf("resolvePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := s.resolvePath("a\x00b"); err == nil {
		t.Error("NUL accepted")
	}
}

func TestParseListing(t *testing.T) {
	raw := []byte("f\t12\tb.txt\x00d\t4096\tsub\x00l\t7\tsub/link\x00p\t0\tfifo\x00")
	got, more := ParseListing(raw, 10)
	want := []FileEntry{{"b.txt", "file", 12}, {"fifo", "other", 0}, {"sub", "dir", 4096}, {"sub/link", "symlink", 7}}
	if more || !slices.Equal(got, want) {
		t.Errorf("got %v (more %v)", got, more)
	}
	if got, more := ParseListing(raw, 2); !more || len(got) != 2 {
		t.Errorf("capped: %v %v", got, more)
	}
	if got, more := ParseListing(nil, 2); more || got == nil || len(got) != 0 {
		t.Errorf("empty: %#v %v", got, more)
	}
}

func TestLastBytes(t *testing.T) {
	if s, cut := lastBytes([]byte("short"), 10); s != "short" || cut {
		t.Errorf("%q %v", s, cut)
	}
	if s, cut := lastBytes([]byte("line one\nline two\nline three\n"), 15); s != "line three\n" || !cut {
		t.Errorf("%q %v", s, cut)
	}
}

// forward_port is denied by default (the ports tool), and says so before it runs.
func TestForwardPortDeniedByDefault(t *testing.T) {
	cs := connect(t, resolved(nil), nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Tools, func(t *mcp.Tool) bool { return t.Name == "forward_port" })
	if i < 0 || !strings.HasPrefix(res.Tools[i].Description, "DENIED by the tool policy (ports tool") {
		t.Fatalf("forward_port's description: %v", res.Tools)
	}
	r := call(t, cs, "forward_port", map[string]any{"port": 8000})
	if !r.IsError || !strings.Contains(text(r), `tool "ports" is denied by "ports" in tools.deny`) || !strings.Contains(text(r), "hint:") {
		t.Errorf("forward_port: error %v, %q", r.IsError, text(r))
	}
}
