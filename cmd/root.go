package cmd

import (
	"fmt"

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
func NewCmdRoot(f *cmdutil.Factory) *cobra.Command {
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

	root.AddCommand(
		create.NewCmdCreate(f, nil),
		exec.NewCmdExec(f, nil),
		cp.NewCmdCp(f, nil),
		ls.NewCmdLs(f, nil),
		stop.NewCmdStop(f, nil),
		rm.NewCmdRm(f, nil),
		diff.NewCmdDiff(f, nil),
		apply.NewCmdApply(f, nil),
		discard.NewCmdDiscard(f, nil),
		sync.NewCmdSync(f, nil),
		checkpoint.NewCmdCheckpoint(f, nil),
		rollback.NewCmdRollback(f, nil),
		prune.NewCmdPrune(f, nil),
		version.NewCmdVersion(f, nil),
		doctor.NewCmdDoctor(f, nil),
		explain.NewCmdExplain(f, nil),
		configcmd.NewCmdConfig(f),
		image.NewCmdImage(f),
		browser.NewCmdBrowser(f, nil),
		run.NewCmdRun(f, nil),
		ps.NewCmdPs(f, nil),
		logs.NewCmdLogs(f, nil),
		trust.NewCmdTrust(f, nil),
		kill.NewCmdKill(f, nil),
		mcp.NewCmdMCP(f, nil),
		pause.NewCmdPause(f, nil),
		pause.NewCmdResume(f, nil),
		stats.NewCmdStats(f, nil),
		sh.NewCmdSh(f, nil),
		egresscmd.NewCmdEgress(f),
		portforward.NewCmdPortForward(f, nil),
		pool.NewCmdPool(f),
	)
	return root
}
