package cmd

import (
	"bytes"
	"context"
	_ "embed"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// pwnTool is the hostile image's rm, sh, find, tar, cp and healthcheck.
//
//go:embed testdata/pwn.sh
var pwnTool []byte

// hostileImage builds an image FROM the base whose rm, sh, find, tar and cp come first in
// PATH and leave markers where sbx's helpers mount host directories, with a HEALTHCHECK doing
// the same every second. It is removed when the test ends.
func hostileImage(t *testing.T) string {
	t.Helper()
	dockerfile := "FROM " + baseImage + "\nCOPY pwn /usr/local/sbin/pwn\n" +
		"RUN for t in rm sh find tar cp hc; do ln -s pwn /usr/local/sbin/$t; done\n" +
		"HEALTHCHECK --interval=1s --timeout=5s CMD [\"/usr/local/sbin/hc\"]\n"
	return buildTestImage(t, "sbx-test-hostile:"+strings.ToLower(cliRun)+"-"+randHex(t),
		testFile{"Dockerfile", []byte(dockerfile), 0o644}, testFile{"pwn", pwnTool, 0o755})
}

func TestCLIHostileImageNeverRunsOnTheHostRoot(t *testing.T) {
	testHostileImage(t, newCLI(t), "--user", "0:0")
}

func TestCLIHostileImageNeverRunsOnTheHostNonRoot(t *testing.T) {
	testHostileImage(t, newCLIAs(t, nonRootUID))
}

func testHostileImage(t *testing.T, c *cli, createFlags ...string) {
	img := hostileImage(t)
	ctx := context.Background()
	name := cliRun + "-hostile-" + randHex(t)
	c.Write("notes.txt", "host\n")
	if r := c.Run(append([]string{"create", "-n", name, "--image", img, "--workspace", "overlay", "--egress", "example.invalid"}, createFlags...)...); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", "echo sandbox > /workspace/notes.txt"); r.Code != 0 {
		t.Fatalf("exec: %s", r)
	}

	// The proxy is sbx's own: its image, no healthcheck.
	proxy, err := c.Eng.ContainerInspect(ctx, sandbox.ProxyName(name))
	if err != nil {
		t.Fatal(err)
	}
	if proxy.Config.Image != sandbox.HelperImage || proxy.Config.Healthcheck == nil || !slices.Equal(proxy.Config.Healthcheck.Test, []string{"NONE"}) {
		t.Errorf("the egress proxy runs image %q with healthcheck %+v; want %s with none", proxy.Config.Image, proxy.Config.Healthcheck, sandbox.HelperImage)
	}
	rulesPath := ""
	_ = filepath.WalkDir(c.Home, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "rules.json" && strings.Contains(p, name) {
			rulesPath = p
		}
		return nil
	})
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatalf("the proxy's rules file: %v", err)
	}

	// The sandbox's own healthcheck runs (in the sandbox, the image's business): three of its
	// runs are the clock the proxy's would have run by.
	deadline := time.Now().Add(90 * time.Second)
	for {
		info, err := c.Eng.ContainerInspect(ctx, sandbox.ContainerName(name))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Health != nil && len(info.State.Health.Log) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image's healthcheck never ran in the sandbox: %+v", info.State.Health)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, args := range [][]string{
		{"egress", "allow", name, "example.org"},
		{"cp", filepath.Join(c.Project, "notes.txt"), name + ":/tmp/in.txt"},
		{"cp", name + ":/tmp/in.txt", filepath.Join(c.Home, "out.txt")},
		{"diff", "-n", name},
		{"apply", "-n", name, "--yes"},
	} {
		if r := c.Run(args...); r.Code != 0 {
			t.Fatalf("%v: %s", args, r)
		}
	}
	if after, err := os.ReadFile(rulesPath); err != nil || !bytes.Contains(after, []byte("example.org")) || bytes.Contains(after, []byte("0.0.0.0/0")) {
		t.Errorf("the proxy's rules were rewritten (before %q): %q %v", rules, after, err)
	}
	if r := c.Run("rm", "-f", name); r.Code != 0 {
		t.Fatalf("rm: %s", r)
	}
	// prune removes an overlay sandbox's layers as rm does.
	pruned := name + "-pruned"
	if r := c.Run(append([]string{"create", "-n", pruned, "--image", img, "--workspace", "overlay"}, createFlags...)...); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	if r := c.Run("exec", "-n", pruned, "--", "sh", "-c", "echo pruned > /workspace/gone.txt"); r.Code != 0 {
		t.Fatalf("exec: %s", r)
	}
	if r := c.Run("prune", "-f", "--all", "--filter", "name="+pruned); r.Code != 0 || !strings.Contains(r.Stdout+r.Stderr, pruned) {
		t.Fatalf("prune: %s", r)
	}

	// No marker anywhere sbx keeps state or the project, and nothing left behind.
	var found []string
	for _, root := range []string{c.Home, c.Project} {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && (d.Name() == "PWNED" || d.Name() == "pwned") {
				found = append(found, p)
			}
			return nil
		})
	}
	if len(found) > 0 {
		t.Fatalf("the image's code ran in sbx's own work: %v", found)
	}
}
