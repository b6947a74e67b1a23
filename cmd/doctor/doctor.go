// Package doctor implements "sbx doctor".
package doctor

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/docker/docker/api/types/system"
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Status of one check.
const (
	StatusOK   = "ok"
	StatusFail = "fail"
	StatusWarn = "warn"
)

// DoctorOptions are the inputs of "sbx doctor".
type DoctorOptions struct {
	IO       *iostreams.IOStreams
	Endpoint func() (engine.Endpoint, error)
	Engine   func(context.Context) (engine.Engine, error)
	JSON     bool
	// ImageFiles holds the bundled Dockerfiles the image checks compare with; nil means
	// the embedded ones.
	ImageFiles fs.FS
	// ResolveConfig reads the config files without the engine; nil skips the config checks.
	ResolveConfig func() (*config.Resolved, error)
}

// Check is one line of the report. Required checks that fail make doctor exit 1.
type Check struct {
	Name     string `json:"name"`
	Status   string `json:"status"`
	Detail   string `json:"detail"`
	Fix      string `json:"fix,omitempty"`
	Required bool   `json:"required"`
}

// Report is the --json output of "sbx doctor".
type Report struct {
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

// NewCmdDoctor builds "sbx doctor".
func NewCmdDoctor(f *cmdutil.Factory, runF func(context.Context, *DoctorOptions) error) *cobra.Command {
	opts := &DoctorOptions{IO: f.IOStreams, Endpoint: f.Endpoint, Engine: f.Engine,
		ResolveConfig: func() (*config.Resolved, error) { return cmdutil.ResolveConfig(f, "") }}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this machine can run sandboxes safely",
		Long: `Check the Docker engine and this machine for what sbx needs: the engine answers, cgroup
limits work, seccomp is on, runc and the init binary are there, and sbx's images and config
files are in order. Every failed check prints a fix. Exits 1 when a required check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return doctorRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the checks as JSON")
	return cmd
}

func doctorRun(ctx context.Context, opts *DoctorOptions) error {
	rep := Report{Checks: append(engineChecks(ctx, opts), configChecks(opts)...)}
	rep.OK = true
	for _, c := range rep.Checks {
		if c.Required && c.Status == StatusFail {
			rep.OK = false
		}
	}
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, rep); err != nil {
			return err
		}
	} else {
		printReport(opts.IO, rep)
	}
	if !rep.OK {
		return &errs.ExitError{Code: errs.CodeError}
	}
	return nil
}

func engineChecks(ctx context.Context, opts *DoctorOptions) []Check {
	ep, err := opts.Endpoint()
	if err != nil {
		return []Check{{Name: "engine", Status: StatusFail, Required: true, Detail: err.Error(),
			Fix: "fix the Docker context (docker context ls) or unset DOCKER_CONTEXT"}}
	}
	eng, err := opts.Engine(ctx)
	if err != nil {
		return []Check{{Name: "engine", Status: StatusFail, Required: true,
			Detail: fmt.Sprintf("%s (from %s): not reachable: %v", ep.Host, ep.Source, unwrapReach(err)),
			Fix:    "start Docker (as root: scripts/test-env.sh installs and starts one), or set DOCKER_HOST to a running engine"}}
	}
	v, verr := eng.ServerVersion(ctx)
	info, ierr := eng.Info(ctx)
	if verr != nil || ierr != nil {
		return []Check{{Name: "engine", Status: StatusFail, Required: true,
			Detail: fmt.Sprintf("%s answers ping but not version/info: %v", ep.Host, firstErr(verr, ierr)),
			Fix:    "check the engine's log; the API may be restricted by a proxy"}}
	}
	kind := engine.Refine(ctx, eng, engine.KindOf(v, info))
	checks := []Check{{Name: "engine", Status: StatusOK, Required: true,
		Detail: fmt.Sprintf("%s (from %s), %s, API %s (client uses %s)", ep.Host, ep.Source, kind, v.APIVersion, eng.ClientVersion())}}
	checks = append(checks, agentCheck(ep.Host, sandbox.AgentsSupported(ep.Host)))
	checks = append(checks, infoChecks(kind, info)...)
	return append(checks, imageChecks(ctx, eng, opts.ImageFiles)...)
}

// agentCheck says whether new sandboxes get sbx's agent, which starts commands without the
// engine's exec: only an engine whose Unix socket is on this machine can mount its directory.
func agentCheck(host string, supported bool) Check {
	if supported {
		return Check{Name: "agent", Status: StatusOK, Detail: "sandboxes start commands through sbx's agent (on any image when sbx is static, as make build makes it)"}
	}
	return Check{Name: "agent", Status: StatusWarn,
		Detail: fmt.Sprintf("the engine at %s is not on this machine's filesystem: commands go through the engine's exec (about 100 ms more each)", host),
		Fix:    "use an engine on this machine (a unix:// socket) for the faster path; everything else works as it is"}
}

// infoChecks judges what the engine reports about itself. It is pure so every branch is testable.
func infoChecks(kind engine.Kind, info system.Info) []Check {
	var checks []Check
	add := func(c Check) { checks = append(checks, c) }

	osCheck := Check{Name: "os/arch", Status: StatusOK, Required: true,
		Detail: fmt.Sprintf("%s/%s, %s, kernel %s", info.OSType, info.Architecture, info.OperatingSystem, info.KernelVersion)}
	if info.OSType != "linux" {
		osCheck.Status, osCheck.Fix = StatusFail, "switch the engine to Linux containers"
	}
	add(osCheck)

	storage := Check{Name: "storage driver", Status: StatusOK, Detail: info.Driver}
	if info.Driver == "vfs" {
		storage.Status, storage.Fix = StatusWarn, storageFix(kind)
	}
	add(storage)

	cg := Check{Name: "cgroups", Status: StatusOK, Required: true,
		Detail: fmt.Sprintf("v%s, driver %s", orUnknown(info.CgroupVersion), orUnknown(info.CgroupDriver))}
	if p := engine.LimitsProblem(kind, info); p != "" {
		// The same judgement refuses each create (sandbox.checkLimits).
		cg.Status = StatusFail
		cg.Detail += "; " + p + ": sandboxes are refused"
		cg.Fix = "run a rootful engine, or a rootless one on cgroup v2 with the memory, cpu and pids controllers delegated (kernel cmdline systemd.unified_cgroup_hierarchy=1)"
	}
	add(cg)

	var seccomp, lsm []string
	for _, opt := range info.SecurityOptions {
		name := secOptName(opt)
		switch name {
		case "seccomp":
			seccomp = append(seccomp, opt)
		case "apparmor", "selinux":
			lsm = append(lsm, name)
		}
	}
	sc := Check{Name: "seccomp", Status: StatusOK, Required: true, Detail: strings.Join(seccomp, " ")}
	if len(seccomp) == 0 {
		sc.Status, sc.Detail = StatusFail, "not supported by the engine"
		sc.Fix = "use an engine built with seccomp (libseccomp) on a kernel with CONFIG_SECCOMP_FILTER"
	}
	add(sc)
	mac := Check{Name: "apparmor/selinux", Status: StatusOK, Detail: strings.Join(lsm, ", ")}
	if len(lsm) == 0 {
		mac.Status, mac.Detail = StatusWarn, "neither is enabled; sandboxes rely on seccomp, dropped capabilities and the read-only root"
		mac.Fix = "install and enable AppArmor (apt-get install apparmor) for an extra layer"
	}
	add(mac)

	var runtimes []string
	for name := range info.Runtimes {
		runtimes = append(runtimes, name)
	}
	slices.Sort(runtimes)
	rt := Check{Name: "runtimes", Status: StatusOK, Required: true, Detail: strings.Join(runtimes, ", ") + " (default " + info.DefaultRuntime + ")"}
	if _, ok := info.Runtimes["runc"]; !ok {
		rt.Status, rt.Fix = StatusFail, "install runc; it is the runtime sbx is tested with"
	}
	add(rt)
	add(gvisorCheck(kind, info))

	initCheck := Check{Name: "init", Status: StatusOK, Required: true, Detail: strings.TrimSpace(orUnknown(info.InitBinary) + " " + info.InitCommit.ID)}
	switch {
	case kind.Product == engine.ProductPodman:
		// Podman runs its own init (catatonit, containers.conf's init_path) for --init and
		// reports no InitBinary.
		initCheck.Detail = "Podman's init (catatonit)"
	case info.InitBinary == "":
		initCheck.Status, initCheck.Fix = StatusFail, "install tini (docker-init); without --init a fork bomb leaves the sandbox unusable"
	}
	add(initCheck)

	runc := Check{Name: "runc", Status: StatusOK, Detail: "commit " + orUnknown(info.RuncCommit.ID)}
	if info.RuncCommit.ID == "" || info.RuncCommit.ID == "N/A" {
		runc.Status, runc.Fix = StatusWarn, "the engine does not report its runc version; keep runc up to date (CVE-2019-5736, CVE-2024-21626)"
	}
	add(runc)
	return checks
}

// storageFix is how a user of an engine of kind k replaces the vfs storage driver, which
// copies every layer, in the engine's own configuration file.
func storageFix(k engine.Kind) string {
	switch {
	case k.Product == engine.ProductPodman && k.Rootless:
		return `vfs copies every layer; set driver = "overlay" in ~/.config/containers/storage.conf (podman system reset applies it, removing the engine's images and containers)`
	case k.Product == engine.ProductPodman:
		return `vfs copies every layer; set driver = "overlay" in /etc/containers/storage.conf (podman system reset applies it, removing the engine's images and containers)`
	case k.Rootless:
		return `vfs copies every layer; set "storage-driver": "overlay2" in ~/.config/docker/daemon.json and restart the engine`
	}
	return `vfs copies every layer; set "storage-driver": "overlay2" in /etc/docker/daemon.json and restart the engine`
}

// gvisorCheck says whether isolation: gvisor works on the engine, and how to make it work; not
// required, as only sandboxes that ask for gVisor need it.
func gvisorCheck(kind engine.Kind, info system.Info) Check {
	if p := sandbox.GVisorProblem(info); p != "" {
		return Check{Name: "gvisor", Status: StatusWarn, Detail: p + ": isolation: gvisor is refused", Fix: sandbox.GVisorSetup(kind)}
	}
	return Check{Name: "gvisor", Status: StatusOK, Detail: "isolation: gvisor runs sandboxes under " + config.GVisorRuntime + " (" + info.Runtimes[config.GVisorRuntime].Path + ")"}
}

// secOptName reads the name out of an engine security option such as "name=seccomp,profile=default".
func secOptName(opt string) string {
	for _, kv := range strings.Split(opt, ",") {
		if name, ok := strings.CutPrefix(kv, "name="); ok {
			return name
		}
	}
	return opt
}

func unwrapReach(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "): "); i >= 0 {
		return msg[i+3:]
	}
	return msg
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func printReport(io *iostreams.IOStreams, rep Report) {
	style := func(c lipgloss.Color) lipgloss.Style { return lipgloss.NewStyle().Foreground(c) }
	marks := map[string]string{StatusOK: "✓", StatusFail: "✗", StatusWarn: "!"}
	colors := map[string]lipgloss.Style{StatusOK: style("2"), StatusFail: style("1"), StatusWarn: style("3")}
	width := 0
	for _, c := range rep.Checks {
		width = max(width, len(c.Name))
	}
	for _, c := range rep.Checks {
		mark := marks[c.Status]
		if io.ColorEnabled() {
			mark = colors[c.Status].Render(mark)
		}
		fmt.Fprintf(io.Out, "%s %-*s  %s\n", mark, width, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(io.Out, "  %*s  fix: %s\n", width, "", c.Fix)
		}
	}
	if !rep.OK {
		fmt.Fprintln(io.Out, "\nsome required checks failed")
	}
}
