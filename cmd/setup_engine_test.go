package cmd

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"

	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
)

// builtTag is the derived image a build announced on stderr, "" when nothing was built.
var builtTag = regexp.MustCompile(`(?m)^built (sbx-derived:[0-9a-f]+) \(`)

func builtTags(stderr string) []string {
	var out []string
	for _, m := range builtTag.FindAllStringSubmatch(stderr, -1) {
		out = append(out, m[1])
	}
	return out
}

// hardened prints, from inside a sandbox, whether the command came through the agent (it
// has a parent; the engine's exec has none), its uid, its effective capabilities, no new
// privileges, whether the image's root can be written and which network interfaces there
// are, then bc's answer to 2+3.
const hardened = `set -u
agent=no; [ "$PPID" != 0 ] && agent=yes
caps=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
nnp=$(sed -n 's/^NoNewPrivs:[[:space:]]*//p' /proc/self/status)
root=ro; touch /usr/bin/sbx-probe 2>/dev/null && root=rw
ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ,)
echo "agent=$agent uid=$(id -u) caps=$caps nnp=$nnp root=$root ifaces=$ifaces marker=$(cat /etc/sbx-setup-marker) bc=$(echo 2+3 | bc)"`

// A project's setup installs a Debian package the bundled image lacks (bc) into an image
// derived from it, built once through sbx's egress proxy (the build has no other way out);
// the sandbox runs it under the full hardening, through the agent. A second exec builds
// nothing, a changed setup builds exactly one image, and an untrusted setup is refused with
// its key named.
func TestCLISetup(t *testing.T) {
	// Removed once the sandboxes are (cleanups run last first): an image in use stays.
	var tags []string
	eng := enginetest.RealEngine(t)
	t.Cleanup(func() {
		for _, tag := range tags {
			if _, err := eng.ImageRemove(context.Background(), tag, image.RemoveOptions{PruneChildren: true}); err != nil {
				t.Errorf("removing %s: %v", tag, err)
			}
		}
	})
	c := newCLI(t)
	name := cliRun + "-setup"
	// A token of this run's own makes its setup new to the engine and its build cache, so the
	// first exec builds it, packages and all, whatever ran before.
	token := strconv.FormatInt(time.Now().UnixNano(), 36)
	setup := func(extra string) string {
		return "setup:\n  apt: [bc]\n  run:\n" +
			"    - echo " + token + " > /etc/sbx-setup-marker\n" +
			// The build reaches the mirror only through the proxy: no name resolves directly.
			"    - if getent hosts deb.debian.org; then echo the build resolved a name without the proxy >&2; exit 1; fi\n" + extra
	}
	c.Write(".sbx.yaml", setup(""))
	if r := c.Run("exec", "-n", name, "--", "true"); r.Code != 125 || !strings.Contains(r.Stderr, `setup.apt "[bc]": loosens the sandbox`) ||
		!strings.Contains(r.Stderr, `setup.run "[`) || len(builtTags(r.Stderr)) != 0 {
		t.Fatalf("an untrusted setup: %s", r)
	}
	c.Trust()

	r := c.Run("exec", "-n", name, "--", "sh", "-c", hardened)
	tags = append(tags, builtTags(r.Stderr)...)
	want := "agent=yes uid=1000 caps=0000000000000000 nnp=1 root=ro ifaces=lo, marker=" + token + " bc=5\n"
	if r.Code != 0 || r.Stdout != want || len(builtTags(r.Stderr)) != 1 {
		t.Fatalf("first exec: want one build and %q: %s", want, r)
	}
	first := tags[0]
	for _, want := range []string{"building " + first + ": the setup of sbx-sandbox:bookworm-slim", "RUN [\"/bin/sh\", \"/tmp/.sbx-setup/sbx-setup.sh\""} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the build's progress lacks %q:\n%s", want, r.Stderr)
		}
	}
	// The build's proxy and network went with it.
	leftovers(t, eng, "sbx_proxy-setup-", "sbx-setup-")

	// Nothing is built again: not for this sandbox, nor for another with the same setup.
	for _, n := range []string{name, name + "2"} {
		if r := c.Run("exec", "-n", n, "--", "sh", "-c", "echo 6*7 | bc"); r.Code != 0 || r.Stdout != "42\n" || strings.Contains(r.Stderr, "building") {
			t.Errorf("exec -n %s with the same setup: %s", n, r)
		}
	}
	r = c.Run("image", "ls", "--json")
	var list []struct {
		Tag, From string
		Setup     *struct{ Apt []string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("image ls --json: %v\n%s", err, r)
	}
	found := false
	for _, img := range list {
		found = found || img.Tag == first && img.From == "sbx-sandbox:bookworm-slim" && img.Setup != nil && len(img.Setup.Apt) == 1 && img.Setup.Apt[0] == "bc"
	}
	if !found {
		t.Errorf("image ls does not show %s from sbx-sandbox:bookworm-slim with apt [bc]:\n%s", first, r.Stdout)
	}

	// A changed setup: one build when the sandbox is made again, none after.
	c.Write(".sbx.yaml", setup("    - touch /etc/sbx-setup-changed\n"))
	c.Trust()
	r = c.Run("create", "-n", name, "--replace")
	tags = append(tags, builtTags(r.Stderr)...)
	if built := builtTags(r.Stderr); r.Code != 0 || len(built) != 1 || built[0] == first {
		t.Fatalf("create --replace after a change of setup: want one new build: %s", r)
	}
	if r := c.Run("exec", "-n", name, "--", "sh", "-c", "test -f /etc/sbx-setup-changed && echo 1+1 | bc"); r.Code != 0 || r.Stdout != "2\n" || strings.Contains(r.Stderr, "building") {
		t.Errorf("exec after the rebuild: %s", r)
	}
}

// leftovers fails t when a container or network of this run starts with one of the prefixes.
func leftovers(t *testing.T, eng engine.Engine, containerPrefix, networkPrefix string) {
	t.Helper()
	ours := filters.NewArgs(filters.Arg("label", enginetest.TestLabel+"="+cliRun))
	list, err := eng.ContainerList(context.Background(), container.ListOptions{All: true, Filters: ours})
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range list {
		for _, n := range ctr.Names {
			if strings.HasPrefix(n, "/"+containerPrefix) {
				t.Errorf("container %s is left", n)
			}
		}
	}
	nets, err := eng.NetworkList(context.Background(), network.ListOptions{Filters: ours})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		if strings.HasPrefix(n.Name, networkPrefix) {
			t.Errorf("network %s is left", n.Name)
		}
	}
}
