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
	c.write(".sbx.yaml", "memory: 512m\n")
	if r := c.run("create", "-n", name, "--pids-limit", "200"); r.code != 0 {
		t.Fatalf("create: %d %q %q", r.code, r.stdout, r.stderr)
	}
	c.write(".sbx.yaml", "memory: 768m\nenv:\n  DRIFT_MARK: \"1\"\n")
	want := []string{"env", "memory", "memorySwap"}

	if state, keys := configState(t, c, name); state != "changed" || !slices.Equal(keys, want) {
		t.Errorf("ls: config %s, keys %v, want changed %v", state, keys, want)
	}

	_, matches, differing := explainLive(t, c, name)
	if matches || !slices.Equal(differing, want) {
		t.Errorf("explain: hash matches %v, keys %v, want %v", matches, differing, want)
	}

	// Just created, so busy: exec runs in it as it is and warns.
	r := c.run("exec", "-n", name, "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "runs with an older configuration") {
		t.Fatalf("exec: %d %q", r.code, r.stderr)
	}
	if keys := changedKeys(t, r.stderr); !slices.Equal(keys, want) {
		t.Errorf("exec: keys %v, want %v", keys, want)
	}

	r = c.run("create", "-n", name)
	if r.code != 125 || !strings.Contains(r.stderr, "exists with a different configuration") {
		t.Fatalf("create: %d %q", r.code, r.stderr)
	}
	if keys := changedKeys(t, r.stderr); !slices.Equal(keys, want) {
		t.Errorf("create: keys %v, want %v", keys, want)
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
