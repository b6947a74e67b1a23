package mcp

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

func TestNewCmdMCPFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdMCP, []cmdtest.FlagCase[MCPOptions]{
		{Args: nil, Check: func(o *MCPOptions) bool { return o.Name == "" }},
		{Args: []string{"-n", "agent"}, Check: func(o *MCPOptions) bool { return o.Name == "agent" }},
		{Args: []string{"-n", "Bad Name"}, WantErr: "name"},
		{Args: []string{"extra"}, WantErr: "unknown command"},
	})
}

// A refused config ends sbx mcp before it serves anything; the engine is never dialled.
func TestMCPRefusesBadConfig(t *testing.T) {
	ios, stdin, stdout, _ := iostreams.Test()
	stdin.WriteString("{}\n")
	wd := t.TempDir()
	if err := os.WriteFile(wd+"/.sbx.yaml", []byte("memory: lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), wd, time.Now(), nil)
	err := mcpRun(context.Background(), &MCPOptions{IO: ios, Factory: f})
	if err == nil || !strings.Contains(err.Error(), "memory") || stdout.Len() != 0 {
		t.Errorf("%v, stdout %q", err, stdout.String())
	}
}

// oneShot is a whole MCP session written at once, as a script pipes it: stdin ends right
// after the last request.
const oneShot = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
`

// Every request read before stdin ends is answered before sbx mcp exits. The SDK, left to
// itself, drops the answers once it reads the end, so a one-shot pipe used to get nothing:
// repeated, so that it cannot pass by luck.
func TestMCPAnswersEveryRequestBeforeEOF(t *testing.T) {
	for i := 0; i < 20; i++ {
		ios, stdin, stdout, _ := iostreams.Test()
		stdin.WriteString(oneShot)
		f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
		if err := mcpRun(context.Background(), &MCPOptions{IO: ios, Factory: f}); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal([]byte(line), &msg); err != nil || msg.Result == nil {
				t.Fatalf("run %d: bad answer %q: %v", i, line, err)
			}
			ids = append(ids, string(msg.ID))
		}
		if strings.Join(ids, ",") != "1,2" || !strings.Contains(stdout.String(), `"name":"exec"`) {
			t.Fatalf("run %d: answered ids %v:\n%s", i, ids, stdout)
		}
	}
}
