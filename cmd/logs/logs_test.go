package logs

import (
	"testing"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
)

func TestNewCmdLogsFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdLogs, []cmdtest.FlagCase[LogsOptions]{
		{Args: []string{"3fa9c1"}, Check: func(o *LogsOptions) bool { return o.ID == "3fa9c1" && o.Tail == -1 && !o.Follow && o.Name == "" }},
		{Args: []string{"-n", "web", "-f", "--tail", "20", "3fa9c1"}, Check: func(o *LogsOptions) bool { return o.Name == "web" && o.Follow && o.Tail == 20 }},
		{Args: []string{"--tail", "0", "x"}, Check: func(o *LogsOptions) bool { return o.Tail == 0 }},
		{Args: nil, WantErr: "accepts 1 arg"},
		{Args: []string{"../x"}, WantErr: "bad process ID"},
		{Args: []string{"--tail", "-2", "x"}, WantErr: "--tail"},
		{Args: []string{"-n", "Bad Name", "x"}, WantErr: "name"},
	})
}
