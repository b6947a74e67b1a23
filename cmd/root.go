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

	root.AddGroup(commandGroups...)
	root.SetHelpCommandGroupID("diag")
	root.SetCompletionCommandGroupID("diag")
	add := func(i int) {
		cmd := subcommands[i].build(f)
		cmd.GroupID = subcommands[i].group
		root.AddCommand(cmd)
	}
	for i, c := range subcommands {
		if first != "" && slices.Contains(c.names, first) {
			add(i)
			return root
		}
	}
	for i := range subcommands {
		add(i)
	}
	return root
}

// commandGroups are the headings of sbx --help, in order, as gh groups its commands.
var commandGroups = []*cobra.Group{
	{ID: "run", Title: "Running code:"},
	{ID: "sandboxes", Title: "Sandboxes:"},
	{ID: "review", Title: "Workspace review:"},
	{ID: "network", Title: "Network:"},
	{ID: "images", Title: "Images:"},
	{ID: "diag", Title: "Setup and diagnosis:"},
}

// subcommands are sbx's commands, each under its name and aliases (TestSubcommandNames holds
// the names to the commands').
var subcommands = []struct {
	names []string
	group string // its heading in sbx --help (commandGroups); "" for a hidden command
	build func(*cmdutil.Factory) *cobra.Command
}{
	{[]string{"create"}, "sandboxes", func(f *cmdutil.Factory) *cobra.Command { return create.NewCmdCreate(f, nil) }},
	{[]string{"exec"}, "run", func(f *cmdutil.Factory) *cobra.Command { return exec.NewCmdExec(f, nil) }},
	{[]string{"cp"}, "review", func(f *cmdutil.Factory) *cobra.Command { return cp.NewCmdCp(f, nil) }},
	{[]string{"ls", "list"}, "sandboxes", func(f *cmdutil.Factory) *cobra.Command { return ls.NewCmdLs(f, nil) }},
	{[]string{"stop"}, "sandboxes", func(f *cmdutil.Factory) *cobra.Command { return stop.NewCmdStop(f, nil) }},
	{[]string{"rm"}, "sandboxes", func(f *cmdutil.Factory) *cobra.Command { return rm.NewCmdRm(f, nil) }},
	{[]string{"diff"}, "review", func(f *cmdutil.Factory) *cobra.Command { return diff.NewCmdDiff(f, nil) }},
	{[]string{"apply"}, "review", func(f *cmdutil.Factory) *cobra.Command { return apply.NewCmdApply(f, nil) }},
	{[]string{"discard"}, "review", func(f *cmdutil.Factory) *cobra.Command { return discard.NewCmdDiscard(f, nil) }},
	{[]string{"sync"}, "review", func(f *cmdutil.Factory) *cobra.Command { return sync.NewCmdSync(f, nil) }},
	{[]string{"checkpoint"}, "review", func(f *cmdutil.Factory) *cobra.Command { return checkpoint.NewCmdCheckpoint(f, nil) }},
	{[]string{"rollback"}, "review", func(f *cmdutil.Factory) *cobra.Command { return rollback.NewCmdRollback(f, nil) }},
	{[]string{"prune"}, "sandboxes", func(f *cmdutil.Factory) *cobra.Command { return prune.NewCmdPrune(f, nil) }},
	{[]string{"version"}, "diag", func(f *cmdutil.Factory) *cobra.Command { return version.NewCmdVersion(f, nil) }},
	{[]string{"doctor"}, "diag", func(f *cmdutil.Factory) *cobra.Command { return doctor.NewCmdDoctor(f, nil) }},
	{[]string{"explain"}, "diag", func(f *cmdutil.Factory) *cobra.Command { return explain.NewCmdExplain(f, nil) }},
	{[]string{"config"}, "diag", configcmd.NewCmdConfig},
	{[]string{"image"}, "images", image.NewCmdImage},
	{[]string{"browser"}, "run", func(f *cmdutil.Factory) *cobra.Command { return browser.NewCmdBrowser(f, nil) }},
	{[]string{"browser-relay"}, "", func(f *cmdutil.Factory) *cobra.Command { return browser.NewCmdRelay(f, nil) }},
	{[]string{"run"}, "run", func(f *cmdutil.Factory) *cobra.Command { return run.NewCmdRun(f, nil) }},
	{[]string{"ps"}, "run", func(f *cmdutil.Factory) *cobra.Command { return ps.NewCmdPs(f, nil) }},
	{[]string{"logs"}, "run", func(f *cmdutil.Factory) *cobra.Command { return logs.NewCmdLogs(f, nil) }},
	{[]string{"trust"}, "diag", func(f *cmdutil.Factory) *cobra.Command { return trust.NewCmdTrust(f, nil) }},
	{[]string{"kill"}, "run", func(f *cmdutil.Factory) *cobra.Command { return kill.NewCmdKill(f, nil) }},
	{[]string{"mcp"}, "run", func(f *cmdutil.Factory) *cobra.Command { return mcp.NewCmdMCP(f, nil) }},
	{[]string{"pause"}, "sandboxes", func(f *cmdutil.Factory) *cobra.Command { return pause.NewCmdPause(f, nil) }},
	{[]string{"resume"}, "sandboxes", func(f *cmdutil.Factory) *cobra.Command { return pause.NewCmdResume(f, nil) }},
	{[]string{"stats"}, "sandboxes", func(f *cmdutil.Factory) *cobra.Command { return stats.NewCmdStats(f, nil) }},
	{[]string{"sh"}, "run", func(f *cmdutil.Factory) *cobra.Command { return sh.NewCmdSh(f, nil) }},
	{[]string{"egress"}, "network", egresscmd.NewCmdEgress},
	{[]string{"port-forward"}, "network", func(f *cmdutil.Factory) *cobra.Command { return portforward.NewCmdPortForward(f, nil) }},
	{[]string{"pool"}, "sandboxes", pool.NewCmdPool},
	{[]string{"helper"}, "", helper.NewCmdHelper},
}
