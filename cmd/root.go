package cmd

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/apply"
	"github.com/sbx-sandbox/sbx/cmd/browser"
	"github.com/sbx-sandbox/sbx/cmd/checkpoint"
	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/configcmd"
	"github.com/sbx-sandbox/sbx/cmd/cp"
	"github.com/sbx-sandbox/sbx/cmd/create"
	"github.com/sbx-sandbox/sbx/cmd/diff"
	"github.com/sbx-sandbox/sbx/cmd/discard"
	"github.com/sbx-sandbox/sbx/cmd/doctor"
	egresscmd "github.com/sbx-sandbox/sbx/cmd/egress"
	"github.com/sbx-sandbox/sbx/cmd/exec"
	"github.com/sbx-sandbox/sbx/cmd/explain"
	"github.com/sbx-sandbox/sbx/cmd/helper"
	"github.com/sbx-sandbox/sbx/cmd/image"
	"github.com/sbx-sandbox/sbx/cmd/kill"
	"github.com/sbx-sandbox/sbx/cmd/logs"
	"github.com/sbx-sandbox/sbx/cmd/ls"
	"github.com/sbx-sandbox/sbx/cmd/mcp"
	"github.com/sbx-sandbox/sbx/cmd/pause"
	"github.com/sbx-sandbox/sbx/cmd/pool"
	"github.com/sbx-sandbox/sbx/cmd/portforward"
	"github.com/sbx-sandbox/sbx/cmd/prune"
	"github.com/sbx-sandbox/sbx/cmd/ps"
	"github.com/sbx-sandbox/sbx/cmd/rm"
	"github.com/sbx-sandbox/sbx/cmd/rollback"
	"github.com/sbx-sandbox/sbx/cmd/run"
	"github.com/sbx-sandbox/sbx/cmd/sh"
	"github.com/sbx-sandbox/sbx/cmd/stats"
	"github.com/sbx-sandbox/sbx/cmd/stop"
	"github.com/sbx-sandbox/sbx/cmd/sync"
	"github.com/sbx-sandbox/sbx/cmd/trust"
	"github.com/sbx-sandbox/sbx/cmd/version"
	"github.com/sbx-sandbox/sbx/pkg/buildinfo"
)

// NewCmdRoot builds "sbx" with its global flags and every subcommand.
func NewCmdRoot(f *cmdutil.Factory) *cobra.Command { return newCmdRoot(f, "") }

// newCmdRoot builds "sbx" with only the subcommand named first when first names one (the
// first argument of sbx's command line), else with every subcommand: building every
// command's flags cost each sbx, a warm exec included, about a millisecond.
func newCmdRoot(f *cmdutil.Factory, first string) *cobra.Command {
	info := buildinfo.Get()
	root := &cobra.Command{
		Use:   "sbx <command>",
		Short: "Run untrusted code in hardened local Docker sandboxes",
		Long: `sbx runs code you do not trust (written by AI agents, or anyone) inside hardened local
Docker containers: read-only root, tmpfs scratch space, no capabilities, no network, no
privilege escalation, and hard CPU, memory and process limits.`,
		Example: `  sbx exec -- python3 -c 'print(6*7)'
  sbx explain
  sbx doctor`,
		Version:       info.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			f.IOStreams.SetQuiet(f.Global.Quiet)
		},
	}
	root.SetVersionTemplate(fmt.Sprintf("sbx version %s (commit %s, %s)\n", info.Version, info.Commit, info.GoVersion))
	root.SetOut(f.IOStreams.Out)
	root.SetErr(f.IOStreams.ErrOut)
	root.SetIn(f.IOStreams.In)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &flagError{err: err} })

	pf := root.PersistentFlags()
	pf.StringVar(&f.Global.ConfigFile, "config", "", "extra config `file`, layered above the project's .sbx.yaml")
	pf.StringVar(&f.Global.ProjectDir, "project", "", "project root `dir` (default: nearest .sbx.yaml, git top-level, or the working directory)")
	pf.StringVar(&f.Global.Context, "context", "", "docker context `name` whose engine to use (beats SBX_CONTEXT, DOCKER_HOST and DOCKER_CONTEXT)")
	pf.BoolVar(&f.Global.Debug, "debug", false, "log every Docker API call, and why a command does not go through the agent, to stderr")
	pf.BoolVarP(&f.Global.Quiet, "quiet", "q", false, "print no progress messages")

	for _, c := range subcommands {
		if first == "" || !slices.Contains(c.names, first) {
			continue
		}
		root.AddCommand(c.build(f))
		return root
	}
	for _, c := range subcommands {
		root.AddCommand(c.build(f))
	}
	return root
}

// subcommands are sbx's commands, each under its name and aliases (TestSubcommandNames holds
// the names to the commands').
var subcommands = []struct {
	names []string
	build func(*cmdutil.Factory) *cobra.Command
}{
	{[]string{"create"}, func(f *cmdutil.Factory) *cobra.Command { return create.NewCmdCreate(f, nil) }},
	{[]string{"exec"}, func(f *cmdutil.Factory) *cobra.Command { return exec.NewCmdExec(f, nil) }},
	{[]string{"cp"}, func(f *cmdutil.Factory) *cobra.Command { return cp.NewCmdCp(f, nil) }},
	{[]string{"ls", "list"}, func(f *cmdutil.Factory) *cobra.Command { return ls.NewCmdLs(f, nil) }},
	{[]string{"stop"}, func(f *cmdutil.Factory) *cobra.Command { return stop.NewCmdStop(f, nil) }},
	{[]string{"rm"}, func(f *cmdutil.Factory) *cobra.Command { return rm.NewCmdRm(f, nil) }},
	{[]string{"diff"}, func(f *cmdutil.Factory) *cobra.Command { return diff.NewCmdDiff(f, nil) }},
	{[]string{"apply"}, func(f *cmdutil.Factory) *cobra.Command { return apply.NewCmdApply(f, nil) }},
	{[]string{"discard"}, func(f *cmdutil.Factory) *cobra.Command { return discard.NewCmdDiscard(f, nil) }},
	{[]string{"sync"}, func(f *cmdutil.Factory) *cobra.Command { return sync.NewCmdSync(f, nil) }},
	{[]string{"checkpoint"}, func(f *cmdutil.Factory) *cobra.Command { return checkpoint.NewCmdCheckpoint(f, nil) }},
	{[]string{"rollback"}, func(f *cmdutil.Factory) *cobra.Command { return rollback.NewCmdRollback(f, nil) }},
	{[]string{"prune"}, func(f *cmdutil.Factory) *cobra.Command { return prune.NewCmdPrune(f, nil) }},
	{[]string{"version"}, func(f *cmdutil.Factory) *cobra.Command { return version.NewCmdVersion(f, nil) }},
	{[]string{"doctor"}, func(f *cmdutil.Factory) *cobra.Command { return doctor.NewCmdDoctor(f, nil) }},
	{[]string{"explain"}, func(f *cmdutil.Factory) *cobra.Command { return explain.NewCmdExplain(f, nil) }},
	{[]string{"config"}, configcmd.NewCmdConfig},
	{[]string{"image"}, image.NewCmdImage},
	{[]string{"browser"}, func(f *cmdutil.Factory) *cobra.Command { return browser.NewCmdBrowser(f, nil) }},
	{[]string{"browser-relay"}, func(f *cmdutil.Factory) *cobra.Command { return browser.NewCmdRelay(f, nil) }},
	{[]string{"run"}, func(f *cmdutil.Factory) *cobra.Command { return run.NewCmdRun(f, nil) }},
	{[]string{"ps"}, func(f *cmdutil.Factory) *cobra.Command { return ps.NewCmdPs(f, nil) }},
	{[]string{"logs"}, func(f *cmdutil.Factory) *cobra.Command { return logs.NewCmdLogs(f, nil) }},
	{[]string{"trust"}, func(f *cmdutil.Factory) *cobra.Command { return trust.NewCmdTrust(f, nil) }},
	{[]string{"kill"}, func(f *cmdutil.Factory) *cobra.Command { return kill.NewCmdKill(f, nil) }},
	{[]string{"mcp"}, func(f *cmdutil.Factory) *cobra.Command { return mcp.NewCmdMCP(f, nil) }},
	{[]string{"pause"}, func(f *cmdutil.Factory) *cobra.Command { return pause.NewCmdPause(f, nil) }},
	{[]string{"resume"}, func(f *cmdutil.Factory) *cobra.Command { return pause.NewCmdResume(f, nil) }},
	{[]string{"stats"}, func(f *cmdutil.Factory) *cobra.Command { return stats.NewCmdStats(f, nil) }},
	{[]string{"sh"}, func(f *cmdutil.Factory) *cobra.Command { return sh.NewCmdSh(f, nil) }},
	{[]string{"egress"}, egresscmd.NewCmdEgress},
	{[]string{"port-forward"}, func(f *cmdutil.Factory) *cobra.Command { return portforward.NewCmdPortForward(f, nil) }},
	{[]string{"pool"}, pool.NewCmdPool},
	{[]string{"helper"}, helper.NewCmdHelper},
}
