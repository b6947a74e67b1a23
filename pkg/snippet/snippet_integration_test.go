package snippet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
	"github.com/sbx-sandbox/sbx/pkg/snippet"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

func TestRunCleansUpWhenInterrupted(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		sb := e.Ensure().Sandbox
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		res, err := snippet.Run(ctx, e.M, sb, snippet.Options{Lang: "bash", Code: []byte("echo started; sleep 100")})
		if err != nil || !res.Canceled {
			t.Fatalf("%+v %v", res, err)
		}
		if o := e.Sh("find /tmp/sbx-run -mindepth 1"); o.Stdout != "" {
			t.Errorf("left behind:\n%s", o.Stdout)
		}
		if got := e.Leftovers(); got != "" {
			t.Errorf("left running:\n%s", got)
		}
	})
}
