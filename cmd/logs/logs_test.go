package logs

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

func TestNewCmdLogsFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	for _, tt := range []struct {
		args    []string
		wantErr string
		check   func(*LogsOptions) bool
	}{
		{args: []string{"3fa9c1"}, check: func(o *LogsOptions) bool { return o.ID == "3fa9c1" && o.Tail == -1 && !o.Follow && o.Name == "" }},
		{args: []string{"-n", "web", "-f", "--tail", "20", "3fa9c1"}, check: func(o *LogsOptions) bool { return o.Name == "web" && o.Follow && o.Tail == 20 }},
		{args: []string{"--tail", "0", "x"}, check: func(o *LogsOptions) bool { return o.Tail == 0 }},
		{args: nil, wantErr: "accepts 1 arg"},
		{args: []string{"../x"}, wantErr: "bad process ID"},
		{args: []string{"--tail", "-2", "x"}, wantErr: "--tail"},
		{args: []string{"-n", "Bad Name", "x"}, wantErr: "name"},
	} {
		var got *LogsOptions
		cmd := NewCmdLogs(f, func(_ context.Context, o *LogsOptions) error { got = o; return nil })
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
		if err != nil || !tt.check(got) {
			t.Errorf("%v: %+v %v", tt.args, got, err)
		}
	}
}
