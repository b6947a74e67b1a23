package cmdutil

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/proc"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// ExitFor maps how a command ended to sbx's exit codes.
func ExitFor(res *sandbox.ExecResult, timeout time.Duration, r *config.Resolved) error {
	switch {
	case res.Canceled && res.LeftRunning:
		return errs.New(errors.New("interrupted; sbx could not end the command, which may still run in the sandbox"), errs.CodeInterrupted,
			"the engine's processes are not on this machine, and the command's watchdog is gone; \"sbx stop\" ends everything in the sandbox")
	case res.Canceled:
		return errs.New(errors.New("interrupted; the command and its processes were terminated"), errs.CodeInterrupted, "")
	case res.TimedOut && res.LeftRunning:
		return errs.New(fmt.Errorf("timed out after %s; sbx could not end the command, which may still run in the sandbox", timeout), errs.CodeTimeout,
			"the engine's processes are not on this machine, and the command's watchdog is gone; \"sbx stop\" ends everything in the sandbox")
	case res.TimedOut:
		return errs.New(fmt.Errorf("timed out after %s; the command and its processes were terminated", timeout), errs.CodeTimeout, timeoutHint(r, timeout))
	case res.OOMKilled && res.SandboxKilled:
		return errs.New(fmt.Errorf("killed: out of memory, limit %s; the sandbox stopped with everything in it, and the next command starts it again", memoryLimit(res, r)), 137,
			memoryHint(res, r))
	case res.OOMKilled:
		return errs.New(fmt.Errorf("killed: out of memory, limit %s", memoryLimit(res, r)), 137, memoryHint(res, r))
	case res.ExitCode != 0:
		return &errs.ExitError{Code: res.ExitCode}
	}
	return nil
}

// memoryLimit is the limit the sandbox was made with, else the one the command resolved.
func memoryLimit(res *sandbox.ExecResult, r *config.Resolved) string {
	if res.MemoryLimit > 0 {
		return config.FormatSize(res.MemoryLimit)
	}
	return config.FormatSize(r.Config.Memory)
}

// memoryHint says how to raise the memory limit: where the command's config sets it, when
// that is the sandbox's limit, else on the sandbox itself.
func memoryHint(res *sandbox.ExecResult, r *config.Resolved) string {
	if res.MemoryLimit > 0 && res.MemoryLimit != r.Config.Memory {
		return "raise memory if the command needs more: the sandbox was made with this limit (sbx create -n NAME --replace --memory SIZE)"
	}
	return fmt.Sprintf("raise memory (now from %s) if the command needs more", r.Source("memory"))
}

// ShellExitFor maps how an sbx sh call ended to sbx's exit codes.
func ShellExitFor(res *proc.ShellResult, timeout time.Duration, r *config.Resolved) error {
	switch {
	case res.Canceled:
		return errs.New(errors.New("interrupted; the script was interrupted and the session keeps its state"), errs.CodeInterrupted, "")
	case res.TimedOut:
		return errs.New(fmt.Errorf("timed out after %s; the script was interrupted and what it started was ended, the session keeps its state", timeout), errs.CodeTimeout, timeoutHint(r, timeout))
	case res.ExitCode != 0:
		return &errs.ExitError{Code: res.ExitCode}
	}
	return nil
}

// timeoutHint tells how to give a command that timed out longer, naming where its timeout came
// from: --timeout when that set one other than the timeout key's.
func timeoutHint(r *config.Resolved, timeout time.Duration) string {
	if timeout != r.Config.Timeout {
		return fmt.Sprintf("give it longer with --timeout (now %s, from --timeout)", config.FormatDuration(timeout))
	}
	return fmt.Sprintf("give it longer with --timeout, or set the timeout key (now %s, from %s)", config.FormatDuration(r.Config.Timeout), r.Source("timeout"))
}

// WorkDir is dir (-w), else the caller's directory mapped under /workspace when it lies
// inside the project and the project is mounted, else /workspace.
func WorkDir(dir string, r *config.Resolved) string {
	if dir != "" {
		if path.IsAbs(dir) {
			return dir
		}
		return path.Join(sandbox.WorkspacePath, dir)
	}
	if r.Config.Workspace == "none" {
		return sandbox.WorkspacePath
	}
	rel, err := filepath.Rel(r.ProjectRoot, r.WorkingDir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return sandbox.WorkspacePath
	}
	return path.Join(sandbox.WorkspacePath, filepath.ToSlash(rel))
}
