package cmd

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// An image's labels are copied onto every container made from it, so an image can carry
// dev.sbx.* labels that claim to be sbx's. These tests build such an image and check that
// nothing sbx does on the host or in config resolution follows them.

// forgedNetwork is a create-settings label that, were it believed, would put the sandbox on
// the bridge network as if the user had typed --network bridge.
const forgedNetwork = `[{"Key":"network","Values":["bridge"],"Source":{"Layer":"flag","Name":"--network"}}]`

// forgedLabels are what a hostile image sets: every dev.sbx.* label sbx reads back, plus
// one it does not know.
func forgedLabels(hostDir string) map[string]string {
	return map[string]string{
		"dev.sbx.agent-dir":            hostDir, // read by sbx up to this change, to remove it
		sandbox.LabelAgent:             "forged-agent",
		sandbox.LabelToolbox:           "forged-toolbox",
		sandbox.LabelCreateSettings:    forgedNetwork,
		sandbox.LabelWorkspace:         "none",
		sandbox.LabelManaged:           "true",
		sandbox.LabelProfile:           "sandbox",
		imagebuild.LabelDockerfileHash: "forged",
		"dev.sbx.some-future-label":    "forged",
		enginetest.TestLabel:           cliRun,
		"org.example.unrelated-label":  "kept",
	}
}

// forgedImage builds a small image on debian:bookworm-slim carrying labels, and removes it
// when the test ends. Call it before newCLI, so the sandboxes go first.
func forgedImage(t *testing.T, labels map[string]string) string {
	t.Helper()
	eng := enginetest.RealEngine(t)
	tag := "sbx-test-forged:" + cliRun + "-" + randHex(t)
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	df := []byte("FROM debian:bookworm-slim\n")
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df))}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(df)
	_ = tw.Close()
	resp, err := eng.ImageBuild(context.Background(), &ctxTar, build.ImageBuildOptions{Tags: []string{tag}, Labels: labels,
		Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Cleanup(func() {
		_, _ = eng.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	if _, err := eng.ImageInspect(context.Background(), tag); err != nil {
		t.Fatalf("building %s: %v\n%s", tag, err, out)
	}
	return tag
}

func randHex(t *testing.T) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// hostDir is a host directory with a file in it, the kind a forged label names: a project,
// a home. It belongs to uid (-1: the test's own user), as would the user's own files.
type hostDir struct {
	parent, dir, file string
	modes             map[string]os.FileMode
}

func newHostDir(t *testing.T, uid int) *hostDir {
	t.Helper()
	// t.TempDir's parents are private to root; a non-root sbx must reach this one.
	base, err := os.MkdirTemp("", "sbx-hostdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	h := &hostDir{parent: filepath.Join(base, "home"), modes: map[string]os.FileMode{}}
	h.dir = filepath.Join(h.parent, "project")
	h.file = filepath.Join(h.dir, "keep.txt")
	for _, d := range []string{h.parent, h.dir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(h.file, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{h.parent, h.dir, h.file} {
		if uid < 0 {
			break
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{h.parent, h.dir, h.file} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		h.modes[p] = fi.Mode()
	}
	return h
}

// check fails the test unless the directory, its parent and the file are as they were.
func (h *hostDir) check(t *testing.T, when string) {
	t.Helper()
	for p, mode := range h.modes {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %s is gone: %v", when, p, err)
			continue
		}
		if fi.Mode() != mode {
			t.Errorf("%s: %s changed mode from %v to %v", when, p, mode, fi.Mode())
		}
	}
	if data, err := os.ReadFile(h.file); err != nil || string(data) != "keep me\n" {
		t.Errorf("%s: %s reads %q, %v", when, h.file, data, err)
	}
}

// checkOverwritten fails the test unless sbx replaced every forged label on the container.
func checkOverwritten(t *testing.T, c *cli, name, tag string) {
	t.Helper()
	info, err := c.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	l := info.Config.Labels
	for _, k := range []string{"dev.sbx.agent-dir", imagebuild.LabelDockerfileHash, "dev.sbx.some-future-label"} {
		if v, ok := l[k]; !ok || v != "" {
			t.Errorf("label %s: want it emptied, got %q (present %v)", k, v, ok)
		}
	}
	// The agent and toolbox labels are sbx's own: the sandbox got both (an image sbx does not
	// bundle, on this machine's engine), whatever the image claimed.
	if l[sandbox.LabelAgent] != agent.Version() || len(info.Config.Cmd) == 0 || info.Config.Cmd[0] != sandbox.AgentBinaryPath {
		t.Errorf("label %s = %q, command %q: want this sbx's agent (%s)", sandbox.LabelAgent, l[sandbox.LabelAgent], info.Config.Cmd, agent.Version())
	}
	if l[sandbox.LabelToolbox] != images.ToolboxHash() {
		t.Errorf("label %s = %q, want %q", sandbox.LabelToolbox, l[sandbox.LabelToolbox], images.ToolboxHash())
	}
	if strings.Contains(l[sandbox.LabelCreateSettings], "network") {
		t.Errorf("the image's create settings survived: %s", l[sandbox.LabelCreateSettings])
	}
	if l[sandbox.LabelWorkspace] != "ro" || l[sandbox.LabelName] != name || l["org.example.unrelated-label"] != "kept" {
		t.Errorf("labels %v", l)
	}
	if info.Config.Image != tag {
		t.Errorf("image %q, want %q", info.Config.Image, tag)
	}
}

// onlyLoopbackInside fails the test unless the sandbox's network is none: only lo.
func onlyLoopbackInside(t *testing.T, c *cli, name string) {
	t.Helper()
	if r := c.Run("exec", "-n", name, "--", "ls", "/sys/class/net"); r.Code != 0 || r.Stdout != "lo\n" {
		t.Errorf("network interfaces inside: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
}

// configState is sbx ls's view of whether the sandbox's config is current.
func configState(t *testing.T, c *cli, name string) (string, []string) {
	t.Helper()
	var ls []struct {
		Config  string   `json:"config"`
		Changed []string `json:"changedKeys"`
	}
	r := c.Run("ls", "--json", "--filter", "name="+name)
	if err := json.Unmarshal([]byte(r.Stdout), &ls); err != nil || len(ls) != 1 {
		t.Fatalf("ls --json: %v %q %q", err, r.Stdout, r.Stderr)
	}
	return ls[0].Config, ls[0].Changed
}

// checkCurrent fails the test unless sbx ls and sbx explain, resolving the sandbox's config
// again with its creation settings, find it current with network none.
func checkCurrent(t *testing.T, c *cli, name string) {
	t.Helper()
	if state, keys := configState(t, c, name); state != "ok" {
		t.Errorf("ls: config %s %v, want ok", state, keys)
	}
	if network, matches, keys := explainLive(t, c, name); network != "none" || !matches {
		t.Errorf("explain: network %q, hash matches %v (differing %v)", network, matches, keys)
	}
}

// lastUsed puts the sandbox's last use ago in the past, through its state file, as time
// without use would.
func lastUsed(t *testing.T, c *cli, name string, ago time.Duration) {
	t.Helper()
	state := &sandbox.StateStore{Dir: filepath.Join(c.Home, ".state", "sbx"), Now: time.Now}
	if err := state.SetLastUsed(name, time.Now().Add(-ago)); err != nil {
		t.Fatal(err)
	}
}

// removed runs the sbx command args, which must remove the sandbox, checks that it is gone
// and the host directory intact, and returns its output.
func removed(t *testing.T, c *cli, h *hostDir, name string, args ...string) string {
	t.Helper()
	r := c.Run(args...)
	if r.Code != 0 {
		t.Fatalf("sbx %s: %d %q %q", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	h.check(t, "after sbx "+args[0])
	if n := len(c.Containers(name)); n != 0 {
		t.Errorf("%d containers left after sbx %s", n, args[0])
	}
	return r.Stdout
}

// explainLive returns what sbx explain says about the sandbox's network and whether the
// running sandbox matches its config.
func explainLive(t *testing.T, c *cli, name string) (network string, matches bool, differing []string) {
	t.Helper()
	var rep struct {
		Settings []struct{ Key, Value string }
		Engine   struct {
			HashMatches   bool     `json:"hashMatches"`
			DifferingKeys []string `json:"differingKeys"`
		}
	}
	r := c.Run("explain", name, "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("explain --json: %v %q %q", err, r.Stdout, r.Stderr)
	}
	for _, s := range rep.Settings {
		if s.Key == "network" {
			network = s.Value
		}
	}
	return network, rep.Engine.HashMatches, rep.Engine.DifferingKeys
}

// createOnImage creates a sandbox on tag, named with --image as the user's own words, and
// checks that sbx overwrote the image's labels and kept the network none.
func createOnImage(t *testing.T, c *cli, tag string) string {
	t.Helper()
	name := cliRun + "-forged-" + randHex(t)
	if r := c.Run("create", "-n", name, "--image", tag); r.Code != 0 {
		t.Fatalf("create: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	checkOverwritten(t, c, name, tag)
	onlyLoopbackInside(t, c, name)
	return name
}

// The image is named with --image, the user's own words. sbx rm -f must not remove or
// change the host directory the image's label names, whether sbx runs as root or not.
func TestCLIForgedLabelsRm(t *testing.T) {
	for _, asUser := range []bool{false, true} {
		t.Run(map[bool]string{false: "root", true: "non-root"}[asUser], func(t *testing.T) {
			uid := -1
			if asUser {
				uid = nonRootUID
			}
			h := newHostDir(t, uid)
			tag := forgedImage(t, forgedLabels(h.dir))
			var c *cli
			if asUser {
				c = newCLIAs(t, nonRootUID)
			} else {
				c = newCLI(t)
			}
			name := createOnImage(t, c, tag)
			// Starting a stopped sandbox once made the directory a label named writable to all.
			if r := c.Run("stop", name); r.Code != 0 {
				t.Fatalf("stop: %q", r.Stderr)
			}
			onlyLoopbackInside(t, c, name)
			h.check(t, "after create, exec, stop and exec")
			checkCurrent(t, c, name)
			removed(t, c, h, name, "rm", "-f", name)
		})
	}
}

// sbx prune removes an expired sandbox on the forged image, and nothing its labels name.
func TestCLIForgedLabelsPrune(t *testing.T) {
	h := newHostDir(t, -1)
	tag := forgedImage(t, forgedLabels(h.dir))
	c := newCLI(t)
	name := createOnImage(t, c, tag)
	lastUsed(t, c, name, 48*time.Hour)
	if out := removed(t, c, h, name, "prune", "-f", "--filter", "name="+name); !strings.Contains(out, "removed "+name) {
		t.Errorf("prune -f: %q", out)
	}
}

// A sandbox made without config flags (here the image comes from the user's own config
// file) has no create settings of its own, so the image's forged ones would be all there is:
// they must not count as the user's flags when ls, explain and an idle recreate resolve it
// again.
func TestCLIForgedCreateSettings(t *testing.T) {
	h := newHostDir(t, -1)
	tag := forgedImage(t, forgedLabels(h.dir))
	c := newCLI(t)
	userConfig := filepath.Join(c.Home, ".config", "sbx", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(userConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	writeUserConfig := func(text string) {
		if err := os.WriteFile(userConfig, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeUserConfig("image: " + tag + "\n")
	name := cliRun + "-forged-" + randHex(t)
	if r := c.Run("create", "-n", name); r.Code != 0 {
		t.Fatalf("create: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	checkOverwritten(t, c, name, tag)
	info, err := c.Eng.ContainerInspect(context.Background(), sandbox.ContainerName(name))
	if err != nil {
		t.Fatal(err)
	}
	if v := info.Config.Labels[sandbox.LabelCreateSettings]; v != "" {
		t.Errorf("create settings of a sandbox made without flags: %q, want empty", v)
	}
	checkCurrent(t, c, name)
	onlyLoopbackInside(t, c, name)

	// A real change, and a sandbox idle long enough for exec to recreate it.
	writeUserConfig("image: " + tag + "\nmemory: 600m\n")
	if state, keys := configState(t, c, name); state != "changed" || !slices.Contains(keys, "memory") || slices.Contains(keys, "network") {
		t.Errorf("ls after a memory change: config %s %v, want changed memory and not network", state, keys)
	}
	lastUsed(t, c, name, time.Hour)
	r := c.Run("exec", "-n", name, "--", "ls", "/sys/class/net")
	if r.Code != 0 || r.Stdout != "lo\n" || !strings.Contains(r.Stderr, "recreating") {
		t.Errorf("exec recreating the idle sandbox: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	checkCurrent(t, c, name)
	removed(t, c, h, name, "rm", "-f", name)
}
