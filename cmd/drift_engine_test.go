package cmd

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// exec, create, ls and explain tell whether a sandbox is current by one rule, so for a
// drifted sandbox they name exactly the same keys: the project file's changes, measured
// against the flags the sandbox was created with (which are no change).
func TestCLIDriftSameKeys(t *testing.T) {
	c := newCLI(t)
	name := cliRun + "-drift-" + randHex(t)
	c.Write(".sbx.yaml", "memory: 512m\n")
	if r := c.Run("create", "-n", name, "--pids-limit", "200"); r.Code != 0 {
		t.Fatalf("create: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	c.Write(".sbx.yaml", "memory: 768m\nenv:\n  DRIFT_MARK: \"1\"\n")
	want := []string{"env", "memory", "memorySwap"}

	if state, keys := configState(t, c, name); state != "changed" || !slices.Equal(keys, want) {
		t.Errorf("ls: config %s, keys %v, want changed %v", state, keys, want)
	}

	_, matches, differing := explainLive(t, c, name)
	if matches || !slices.Equal(differing, want) {
		t.Errorf("explain: hash matches %v, keys %v, want %v", matches, differing, want)
	}

	// Just created, so busy: exec runs in it as it is and warns.
	r := c.Run("exec", "-n", name, "--", "true")
	if r.Code != 0 || !strings.Contains(r.Stderr, "runs with an older configuration") {
		t.Fatalf("exec: %d %q", r.Code, r.Stderr)
	}
	if keys := changedKeys(t, r.Stderr); !slices.Equal(keys, want) {
		t.Errorf("exec: keys %v, want %v", keys, want)
	}

	r = c.Run("create", "-n", name)
	if r.Code != 125 || !strings.Contains(r.Stderr, "exists with a different configuration") {
		t.Fatalf("create: %d %q", r.Code, r.Stderr)
	}
	if keys := changedKeys(t, r.Stderr); !slices.Equal(keys, want) {
		t.Errorf("create: keys %v, want %v", keys, want)
	}

	// A create flag other than the one the sandbox was made with is a change too.
	r = c.Run("create", "-n", name, "--pids-limit", "300")
	if r.Code != 125 {
		t.Fatalf("create --pids-limit 300: %d %q", r.Code, r.Stderr)
	}
	if keys, want := changedKeys(t, r.Stderr), []string{"env", "memory", "memorySwap", "pidsLimit"}; !slices.Equal(keys, want) {
		t.Errorf("create --pids-limit 300: keys %v, want %v", keys, want)
	}
}

// changedKeys reads the keys of "(changed: a, b)" in sbx's drift warning or error.
func changedKeys(t *testing.T, stderr string) []string {
	t.Helper()
	m := regexp.MustCompile(`\(changed: ([^)]*)\)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no changed keys in %q", stderr)
	}
	return strings.Split(m[1], ", ")
}
