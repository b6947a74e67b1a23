package kill

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

func TestNewCmdKillFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	for _, tt := range []struct {
		args          []string
		wantErr       string
		id, sig, name string
	}{
		{args: []string{"3fa9c1"}, id: "3fa9c1", sig: "TERM"},
		{args: []string{"-n", "web", "--signal", "sigkill", "3fa9c1"}, id: "3fa9c1", sig: "KILL", name: "web"},
		{args: []string{"-s", "9", "x"}, id: "x", sig: "9"},
		{args: []string{"--signal", "NOPE", "x"}, wantErr: "unknown signal"},
		{args: []string{"a/b"}, wantErr: "bad process ID"},
		{args: nil, wantErr: "accepts 1 arg"},
	} {
		var got *KillOptions
		cmd := NewCmdKill(f, func(_ context.Context, o *KillOptions) error { got = o; return nil })
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
		if err != nil || got.ID != tt.id || got.Signal != tt.sig || got.Name != tt.name {
			t.Errorf("%v: %+v %v", tt.args, got, err)
		}
	}
}
