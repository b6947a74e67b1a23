package mcp

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

func TestNewCmdMCPFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	for _, tt := range []struct {
		args          []string
		wantErr, name string
	}{
		{args: nil},
		{args: []string{"-n", "agent"}, name: "agent"},
		{args: []string{"-n", "Bad Name"}, wantErr: "name"},
		{args: []string{"extra"}, wantErr: "unknown command"},
	} {
		var got *MCPOptions
		cmd := NewCmdMCP(f, func(_ context.Context, o *MCPOptions) error { got = o; return nil })
		cmd.SetArgs(tt.args)
		cmd.SetOut(os.Stderr)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.Name != tt.name {
			t.Errorf("%v: %+v %v", tt.args, got, err)
		}
	}
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
