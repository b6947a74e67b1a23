package kill

import (
	"testing"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
)

func TestNewCmdKillFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdKill, []cmdtest.FlagCase[KillOptions]{
		{Args: []string{"3fa9c1"}, Check: func(o *KillOptions) bool { return o.ID == "3fa9c1" && o.Signal == "TERM" && o.Name == "" }},
		{Args: []string{"-n", "web", "--signal", "sigkill", "3fa9c1"}, Check: func(o *KillOptions) bool { return o.ID == "3fa9c1" && o.Signal == "KILL" && o.Name == "web" }},
		{Args: []string{"-s", "9", "x"}, Check: func(o *KillOptions) bool { return o.ID == "x" && o.Signal == "9" }},
		{Args: []string{"--signal", "NOPE", "x"}, WantErr: "unknown signal"},
		{Args: []string{"a/b"}, WantErr: "bad process ID"},
		{Args: nil, WantErr: "accepts 1 arg"},
	})
}
