package engine

import (
	"errors"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
)

// The messages are those of Docker 20.10 and runc 1.1.
func TestIsProcessLimit(t *testing.T) {
	for msg, want := range map[string]bool{
		"OCI runtime exec failed: exec failed: unable to start container process: fork/exec /usr/bin/bash: resource temporarily unavailable: unknown": true,
		"OCI runtime exec failed: exec failed: unable to start container process: cgroup pids limit reached: unknown":                                 true,
		"OCI runtime exec failed: exec failed: unable to start container process: exec: \"nope\": executable file not found in $PATH: unknown":        false,
		"Container 0123abcd is not running": false,
	} {
		if got := IsProcessLimit(cerrdefs.ErrInternal.WithMessage(msg)); got != want {
			t.Errorf("IsProcessLimit(%q) = %v, want %v", msg, got, want)
		}
	}
	if IsProcessLimit(nil) {
		t.Error("IsProcessLimit(nil) = true")
	}
}

func TestRefusedMount(t *testing.T) {
	const dir = "/home/u/.local/state/sbx/agent/app-1a2b3c"
	missing := cerrdefs.ErrInvalidArgument.WithMessage(`invalid mount config for type "bind": bind source path does not exist: ` + dir)
	if !RefusedMount(missing, dir) {
		t.Errorf("a missing agent directory is not recognised: %v", missing)
	}
	desktop := errors.New("Mounts denied: \nThe path " + dir + " is not shared from the host and is not known to Docker.")
	if !RefusedMount(desktop, dir) {
		t.Errorf("a path the engine does not share is not recognised: %v", desktop)
	}
	other := cerrdefs.ErrInvalidArgument.WithMessage(`invalid mount config for type "bind": bind source path does not exist: /src/app/.vscode`)
	if RefusedMount(other, dir) || RefusedMount(missing, "") || RefusedMount(nil, dir) {
		t.Error("another mount, no source or no error counts as refusing the source")
	}
}

func TestIsMissingBindSource(t *testing.T) {
	gone := cerrdefs.ErrInvalidArgument.WithMessage(`invalid mount config for type "bind": bind source path does not exist: /src/app/.vscode`)
	cpus := cerrdefs.ErrInvalidArgument.WithMessage("Range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs available")
	if !IsMissingBindSource(gone) || IsMissingBindSource(cpus) || IsMissingBindSource(nil) {
		t.Errorf("IsMissingBindSource: %v for a missing source, %v for too many CPUs, %v for no error",
			IsMissingBindSource(gone), IsMissingBindSource(cpus), IsMissingBindSource(nil))
	}
}
