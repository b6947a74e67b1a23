package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/mount"
)

// The toolbox is a read-only mount and a label; its sleep keeps the sandbox alive, and it
// shapes nothing the config hash covers.
func TestBuildSpecToolbox(t *testing.T) {
	plain := buildTestSpec(t, nil)
	spec := buildTestSpec(t, func(in *SpecInput) { in.ToolboxDir = "/state/toolbox/0123abcd" })
	if plain.Container.Labels[LabelToolbox] != "" || spec.Container.Labels[LabelToolbox] != "0123abcd" {
		t.Errorf("labels: without %q, with %q", plain.Container.Labels[LabelToolbox], spec.Container.Labels[LabelToolbox])
	}
	if !slices.Equal(spec.Container.Cmd, []string{"/run/sbx-tools/bin/sleep", "infinity"}) {
		t.Errorf("cmd %q", spec.Container.Cmd)
	}
	want := mount.Mount{Type: mount.TypeBind, Source: "/state/toolbox/0123abcd", Target: ToolboxMountPath, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}
	i := slices.IndexFunc(spec.Host.Mounts, func(m mount.Mount) bool { return m.Target == ToolboxMountPath })
	if i < 0 || spec.Host.Mounts[i].Source != want.Source || !spec.Host.Mounts[i].ReadOnly || spec.Host.Mounts[i].Type != want.Type ||
		spec.Host.Mounts[i].BindOptions.Propagation != want.BindOptions.Propagation {
		t.Errorf("mounts %+v", spec.Host.Mounts)
	}
	if slices.ContainsFunc(plain.Host.Mounts, func(m mount.Mount) bool { return m.Target == ToolboxMountPath }) {
		t.Error("a toolbox mount without ToolboxDir")
	}
	if spec.Hash != plain.Hash {
		t.Error("the toolbox changed the config hash")
	}
	withAgent := buildTestSpec(t, func(in *SpecInput) {
		in.ToolboxDir, in.AgentDir, in.AgentBinary = "/state/toolbox/0123abcd", "/state/agent/x", "/usr/bin/sbx"
	})
	if withAgent.Container.Cmd[0] != AgentBinaryPath {
		t.Errorf("the agent is not the main process beside the toolbox: %q", withAgent.Container.Cmd)
	}
}

// Script runs sbx's scripts with the toolbox's bash and its applets after the image's PATH,
// once however often it is nested; without the toolbox, with the image's bash as before.
func TestSandboxScript(t *testing.T) {
	plain := &Sandbox{Labels: map[string]string{}}
	if got := plain.Script("echo hi", "sbx-x", "a"); !slices.Equal(got, []string{"bash", "-c", "echo hi", "sbx-x", "a"}) {
		t.Errorf("without the toolbox: %q", got)
	}
	tb := &Sandbox{Labels: map[string]string{LabelToolbox: "0123"}}
	got := tb.Script(`echo "$PATH"`, "sbx-x")
	if got[0] != "/run/sbx-tools/bash" || tb.Bash() != "/run/sbx-tools/bash" || got[3] != "sbx-x" {
		t.Fatalf("with the toolbox: %q", got)
	}
	// The prelude runs here in the host's bash, twice over as when a script starts another.
	inner := tb.Script(`echo "$PATH"`, "sbx-y")
	cmd := exec.Command("bash", "-c", got[2][:len(got[2])-len(`echo "$PATH"`)]+`bash -c "$1" sbx-y`, "sbx-x", inner[2])
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil || string(out) != "/usr/bin:/bin:/run/sbx-tools/bin\n" {
		t.Errorf("PATH in a nested script: %q %v", out, err)
	}
}

// The links of bin/ are relative, one per listed applet, and a name that is not an applet's
// is refused.
func TestLinkApplets(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "applets"), []byte("[\nls\nsh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := linkApplets(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"[": "../busybox", "ls": "../busybox", "sh": "../busybox", "bash": "../bash"} {
		if got, err := os.Readlink(filepath.Join(dir, "bin", name)); err != nil || got != want {
			t.Errorf("bin/%s -> %q (%v), want %q", name, got, err, want)
		}
	}
	if !toolboxComplete(dir) {
		t.Error("not complete with bin/bash")
	}
	for _, bad := range []string{"../x", "a/b", "bash", ".hidden"} {
		d := t.TempDir()
		_ = os.Mkdir(filepath.Join(d, "bin"), 0o755)
		_ = os.WriteFile(filepath.Join(d, "applets"), []byte(bad+"\n"), 0o644)
		if err := linkApplets(d); err == nil {
			t.Errorf("applet %q accepted", bad)
		}
	}
}
