package portforward

import (
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/portforward"
)

func TestNewCmdPortForwardFlags(t *testing.T) {
	one := func(o *PortForwardOptions, want portforward.Spec) bool {
		return len(o.Specs) == 1 && o.Specs[0] == want
	}
	cmdtest.Flags(t, NewCmdPortForward, []cmdtest.FlagCase[PortForwardOptions]{
		{Args: []string{"8000"}, Check: func(o *PortForwardOptions) bool {
			return one(o, portforward.Spec{Addr: "127.0.0.1", Local: 8000, Remote: 8000}) && o.Wait == 0 && !o.JSON
		}},
		{Args: []string{"-n", "web", "--json", "0:8000", "0.0.0.0:9000:80"}, Check: func(o *PortForwardOptions) bool {
			return o.Name == "web" && o.JSON && len(o.Specs) == 2 && o.Specs[1] == portforward.Spec{Addr: "0.0.0.0", Local: 9000, Remote: 80}
		}},
		{Args: []string{"--wait", "0:8000"}, Check: func(o *PortForwardOptions) bool { return o.Wait == time.Minute && o.WaitHTTP == "" }},
		{Args: []string{"--wait=5s", "0:8000"}, Check: func(o *PortForwardOptions) bool { return o.Wait == 5*time.Second }},
		{Args: []string{"--wait-http", "/health", "0:8000"}, Check: func(o *PortForwardOptions) bool {
			return o.Wait == time.Minute && o.WaitHTTP == "/health"
		}},
		{Args: []string{"--wait-http", "health", "0:8000"}, WantErr: `bad --wait-http "health"`},
		{Args: []string{"--wait=0s", "0:8000"}, WantErr: "--wait needs a positive duration"},
		{Args: []string{"0:0"}, WantErr: `remote port "0" is not a port`},
		{Args: []string{"x"}, WantErr: `bad mapping "x"`},
		{Args: []string{}, WantErr: "requires at least 1 arg"},
		{Args: []string{"-n", "Bad Name", "80"}, WantErr: "name"},
	})
}
