package cmdutil

import (
	"os/exec"
	"path/filepath"
	"syscall"
)

// refill starts "sbx pool fill" for sandbox name's configuration, detached: in a session of
// its own, its stdio on /dev/null, not waited for. It outlives this sbx, so the command that
// took a sandbox from the pool is not delayed, and no daemon is needed. Fills of one
// configuration take turns (sandbox.Manager.FillPool), so a burst of claims starts a few
// fills that top the pool up once. A fill that cannot start is not this command's failure.
func refill(f *Factory, name string) {
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
