package cmdutil

import (
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
)

// refill notes that sandbox name's pool needs refilling; StartRefills starts the fill once
// the command has ended, so that making a container does not compete with the command for
// the engine and the machine.
func refill(f *Factory, name string) {
	if f.refills == nil {
		f.refills = new([]string)
	}
	if !slices.Contains(*f.refills, name) {
		*f.refills = append(*f.refills, name)
	}
}

// StartRefills starts, for each pool a command took from (refill), "sbx pool fill" for that
// sandbox's configuration, detached: in a session of its own, its stdio on /dev/null, not
// waited for. It outlives this sbx, so no command waits for a fill, and no daemon is
// needed. Fills of one configuration take turns (sandbox.Manager.FillPool), so a burst of
// claims starts a few fills that top the pool up once. A fill that cannot start is not this
// command's failure.
func StartRefills(f *Factory) {
	if f.refills == nil {
		return
	}
	for _, name := range *f.refills {
		startFill(f, name)
	}
	*f.refills = nil
}

func startFill(f *Factory, name string) {
	exe := executable()
	if exe == "" {
		return
	}
	args := []string{"--quiet"}
	g := f.Global
	if g.ConfigFile != "" {
		if abs, err := filepath.Abs(g.ConfigFile); err == nil {
			args = append(args, "--config", abs)
		}
	}
	if g.ProjectDir != "" {
		if abs, err := filepath.Abs(g.ProjectDir); err == nil {
			args = append(args, "--project", abs)
		}
	}
	if g.Context != "" {
		args = append(args, "--context", g.Context)
	}
	cmd := exec.Command(exe, append(args, "pool", "fill", "-n", name)...)
	cmd.Env = f.Environ()
	if dir, err := f.WorkingDir(); err == nil {
		cmd.Dir = dir
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return
	}
	_ = cmd.Process.Release()
}
