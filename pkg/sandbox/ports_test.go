package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/portforward"
)

// A sandbox without this sbx's agent is refused with the reason and the fix: ports are
// reached only through the agent.
func TestDialPortWithoutAgent(t *testing.T) {
	m := &Manager{}
	for _, labels := range []map[string]string{{}, {LabelAgent: "0123456789ab"}} {
		sb := &Sandbox{Name: "web", Labels: labels}
		_, err := m.DialPort(context.Background(), sb, 8000)
		if err == nil || errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(err.Error(), `reaching port 8000 in sandbox "web": sandbox "web"`) ||
			!strings.Contains(errs.Hint(err), "sbx create -n web --replace") {
			t.Errorf("labels %v: got %v (exit %d, hint %q)", labels, err, errs.ExitCode(err), errs.Hint(err))
		}
		if _, err := portforward.Listening(context.Background(), m.PortDialer(sb), 8000); err == nil {
			t.Errorf("labels %v: Listening without an agent did not fail", labels)
		}
	}
}
