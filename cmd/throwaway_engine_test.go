package cmd

import (
	"bytes"
	"context"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

var throwawayCreated = regexp.MustCompile(`created sandbox "(tmp-[0-9a-f]{10})"`)

// throwawayName is the sandbox an --rm command said it created.
func throwawayName(t *testing.T, stderr string) string {
	t.Helper()
	m := throwawayCreated.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no throwaway sandbox was created; stderr: %q", stderr)
	}
	return m[1]
}

// remains lists what is left of sandbox name: its containers (its own and its proxy),
// volumes and networks, and the paths in sbx's state directory named after it.
func (c *cli) remains(name string) []string {
	c.T.Helper()
	ctx := context.Background()
	var left []string
	byName := filters.NewArgs(filters.Arg("name", name))
	ctrs, err := c.Eng.ContainerList(ctx, container.ListOptions{All: true, Filters: byName})
	if err != nil {
		c.T.Fatal(err)
	}
	for _, ctr := range ctrs {
		left = append(left, "container "+strings.Join(ctr.Names, ","))
	}
	vols, err := c.Eng.VolumeList(ctx, volume.ListOptions{Filters: byName})
	if err != nil {
		c.T.Fatal(err)
	}
	for _, v := range vols.Volumes {
		left = append(left, "volume "+v.Name)
	}
	nets, err := c.Eng.NetworkList(ctx, network.ListOptions{Filters: byName})
	if err != nil {
		c.T.Fatal(err)
	}
	for _, n := range nets {
		left = append(left, "network "+n.Name)
	}
	state := filepath.Join(c.Home, ".state", "sbx")
	_ = filepath.WalkDir(state, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), name) {
			left = append(left, "state "+p)
		}
		return nil
	})
	return left
}

// A --rm command leaves nothing of its sandbox (container, proxy, workspace volume, egress
// network, state) when it returns: after running to its end, after Ctrl-C, and for an MCP
// client that closes stdin; after SIGKILL of sbx, the next sbx ls removes what it left.
func TestCLIThrowawayLeavesNothing(t *testing.T) {
	c := newCLI(t)
	// Every kind of remains: a workspace volume, an egress network and proxy (192.0.2.1 is
	// a documentation address; nothing is sent to it).
	c.Write(".sbx.yaml", "workspace: none\negress: ['192.0.2.1:9']\n")
	c.Trust()
	gone := func(t *testing.T, name string) {
		t.Helper()
		if left := c.remains(name); len(left) > 0 {
			t.Errorf("left of %s: %v", name, left)
		}
	}

	t.Run("exec", func(t *testing.T) {
		c := &cli{c.In(t)}
		r := c.Run("exec", "--rm", "--", "sh", "-c", "hostname; exit 3")
		name := throwawayName(t, r.Stderr)
		if r.Code != 3 || strings.TrimSpace(r.Stdout) != sandbox.Hostname {
			t.Fatalf("want the command's hostname and exit code 3: %s", r)
		}
		gone(t, name)
	})
	t.Run("run", func(t *testing.T) {
		c := &cli{c.In(t)}
		r := c.Run("run", "--rm", "--lang", "sh", "-c", "echo snippet")
		if r.Code != 0 || r.Stdout != "snippet\n" {
			t.Fatalf("want the snippet's output: %s", r)
		}
		gone(t, throwawayName(t, r.Stderr))
	})
	t.Run("interrupted", func(t *testing.T) {
		c := &cli{c.In(t)}
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			cmd := c.Cmd("exec", "--rm", "--", "sh", "-c", "echo ready; exec sleep 1000")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			startReady(t, cmd)
			_ = cmd.Process.Signal(sig)
			err := cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Errorf("after %v: exit %d (%v), want 130; stderr: %q", sig, code, err, stderr.String())
			}
			gone(t, throwawayName(t, stderr.String()))
		}
	})
	t.Run("killed", func(t *testing.T) {
		c := &cli{c.In(t)}
		cmd := c.Cmd("exec", "--rm", "--", "sh", "-c", "echo ready; exec sleep 1000")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		startReady(t, cmd)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		name := throwawayName(t, stderr.String())
		if left := c.remains(name); len(left) == 0 {
			t.Fatalf("SIGKILL left nothing of %s: the sweep below proves nothing", name)
		}
		r := c.Run("ls")
		if r.Code != 0 || !strings.Contains(r.Stderr, `removed throwaway sandbox "`+name+`", left by an sbx that did not finish`) || strings.Contains(r.Stdout, name) {
			t.Errorf("sbx ls after SIGKILL: %s", r)
		}
		gone(t, name)
	})
	t.Run("mcp", func(t *testing.T) {
		c := &cli{c.In(t)}
		cmd := c.Cmd("mcp", "--rm")
		cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":{"command":"echo from-the-sandbox"}}}
`)
		r := c.RunIn(cmd)
		if r.Code != 0 || !strings.Contains(r.Stdout, "from-the-sandbox") {
			t.Fatalf("want the exec tool's answer: %s", r)
		}
		gone(t, throwawayName(t, r.Stderr))
	})
}
