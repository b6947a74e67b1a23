package agent_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/agent/agentd"
)

// The agent's command line: OwnSocket comes right after the mode, then Forward, before the
// directory, each only when asked for; the agent refuses what does not parse with its usage
// (exit 2).
func TestCmdAndArguments(t *testing.T) {
	for _, tt := range []struct {
		own     bool
		forward string
		path    string
		want    []string
	}{
		{false, "", "", []string{"/sbx", agent.Mode, "/d", "1500"}},
		{true, "", "", []string{"/sbx", agent.Mode, agent.OwnSocket, "/d", "1500"}},
		{true, "", "/tb/bin", []string{"/sbx", agent.Mode, agent.OwnSocket, "/d", "1500", "/tb/bin"}},
		{true, "127.0.0.1:3128=/s", "", []string{"/sbx", agent.Mode, agent.OwnSocket, agent.Forward + "127.0.0.1:3128=/s", "/d", "1500"}},
	} {
		if got := agent.Cmd("/sbx", "/d", 1500*time.Millisecond, tt.path, tt.own, tt.forward); !slices.Equal(got, tt.want) {
			t.Errorf("Cmd(own %v, path %q) = %q, want %q", tt.own, tt.path, got, tt.want)
		}
	}
	for _, args := range [][]string{
		nil,
		{agent.OwnSocket},
		{agent.OwnSocket, "/d", "1", "/p", "extra"},
		{"/d", "-1"},
		{agent.OwnSocket, "/d", "soon"},
		{"/d", agent.OwnSocket}, // only right after the mode
		{agent.Forward + "127.0.0.1:1=/s"},
		{"/d", agent.Forward + "127.0.0.1:1=/s"}, // only before the directory
	} {
		var stderr bytes.Buffer
		if code := agentd.Main(args, nil, &stderr, time.Now); code != 2 || !strings.HasPrefix(stderr.String(), "sbx-agent: ") {
			t.Errorf("%q: exit %d, %q", args, code, stderr.String())
		}
	}
}
