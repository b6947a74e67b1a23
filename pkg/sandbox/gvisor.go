package sandbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/system"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// GVisorRuntimeArgs are the runsc flags sbx's gVisor sandboxes need, measured on Debian's runsc
// (2022-12-19): the KVM platform hangs on some hosts, so ptrace; gVisor's own network stack
// refuses a network namespace the engine made ("cannot run with network enabled in root
// network namespace") for network none and bridge alike, while --network=host uses the
// sandbox's own namespace for both; without --oci-seccomp runsc ignores the sandbox's
// seccomp profile; --host-uds=create lets the sandbox's agent bind its socket in its host
// directory (gvisoragent.go), the narrowest value that does: with "open" a socket bound
// there stays inside gVisor, no host file appears.
var GVisorRuntimeArgs = []string{"--platform=ptrace", "--network=host", "--oci-seccomp", "--host-uds=create"}

// GVisorRuntimePath is where Debian's runsc package puts the binary.
const GVisorRuntimePath = "/usr/bin/runsc"

// GVisorSetup is the fix for an engine of kind k without sbx's gVisor runtime: for Docker, the
// daemon.json entry (the user's own file for a rootless engine) and the reload that picks it
// up without stopping a container.
func GVisorSetup(k engine.Kind) string {
	if k.Product == engine.ProductPodman {
		return "sbx runs gVisor sandboxes on Docker only: Podman's compatible API takes no runtime with the flags sbx needs; use Docker for isolation: gvisor"
	}
	file, reload := "/etc/docker/daemon.json", "kill -HUP $(pidof dockerd)"
	if k.Rootless {
		file, reload = "~/.config/docker/daemon.json", "systemctl --user reload docker (or kill -HUP your rootless dockerd)"
	}
	return fmt.Sprintf(`install runsc (Debian and Ubuntu: apt-get install runsc), add {"runtimes": {%q: {"path": %q, "runtimeArgs": ["%s"]}}} to %s (merged with what is there), then reload the engine with %s, which restarts no container (or start dockerd with --add-runtime %s=%s)`,
		config.GVisorRuntime, GVisorRuntimePath, strings.Join(GVisorRuntimeArgs, `", "`), file, reload, config.GVisorRuntime, GVisorRuntimePath)
}

// GVisorProblem says what keeps the engine described by info from running gVisor sandboxes,
// "" when nothing does: the runtime must be registered, with every flag sbx needs.
func GVisorProblem(info system.Info) string {
	rt, ok := info.Runtimes[config.GVisorRuntime]
	if !ok {
		return fmt.Sprintf("the engine has no runtime named %s", config.GVisorRuntime)
	}
	var missing []string
	for _, a := range GVisorRuntimeArgs {
		if !slices.Contains(rt.Args, a) {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("the engine's %s runtime lacks %s", config.GVisorRuntime, strings.Join(missing, " "))
	}
	return ""
}

// checkIsolation fails, before anything is made, when the engine cannot run cfg's isolation.
func (m *Manager) checkIsolation(ctx context.Context, cfg config.Config) error {
	if cfg.Isolation != config.IsolationGVisor {
		return nil
	}
	info, err := m.Engine.Info(ctx)
	if err != nil {
		return errs.Engine("asking the engine for its runtimes", err)
	}
	if p := GVisorProblem(info); p != "" {
		f, err := m.facts(ctx)
		if err != nil {
			return err
		}
		return errs.Failure(fmt.Errorf("isolation gvisor: %s", p), GVisorSetup(f.kind))
	}
	return nil
}

// gVisor's ptrace platform runs host tasks of its own in the sandbox's pids cgroup, about eight
// for every process in the sandbox (measured: 49 at the start, 1661 with 200 sleeping
// processes, 201 for an idle sandbox with a shell session), and it panics, ending the sandbox,
// when it cannot make one. So under gVisor the engine's limit is sized for gVisor, and gVisor
// holds the sandbox's own processes to pidsLimit as their RLIMIT_NPROC (a uid's processes
// and threads, which gVisor enforces; root, when set as the user, is exempt as on Linux, and
// then only the engine's limit holds, by ending the sandbox).
const (
	gvisorTasksPerProcess = 10
	gvisorBaseTasks       = 256
)

// gvisorPids returns the engine's pids limit and the ulimits for a gVisor sandbox whose
// configuration asks for pids processes and limits.
func gvisorPids(pids int64, limits map[string]config.Ulimit) (int64, map[string]config.Ulimit) {
	out := maps.Clone(limits)
	if out == nil {
		out = map[string]config.Ulimit{}
	}
	switch n, ok := out["nproc"]; {
	case !ok:
		out["nproc"] = config.Ulimit{Soft: pids, Hard: pids}
	case n.Hard > pids:
		out["nproc"] = config.Ulimit{Soft: min(n.Soft, pids), Hard: pids}
	}
	return pids*gvisorTasksPerProcess + gvisorBaseTasks, out
}
