package image

import (
	"context"
	"io/fs"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// BuildOptions are the inputs of "sbx image build".
type BuildOptions struct {
	IO     *iostreams.IOStreams
	Engine func(context.Context) (engine.Engine, error)
	// Files holds the Dockerfiles; nil means the embedded ones.
	Files fs.FS

	Profiles []string // in build order, without repeats
	NoCache  bool
	Network  string
	Progress string
}

// NewCmdBuild builds "sbx image build".
func NewCmdBuild(f *cmdutil.Factory, runF func(context.Context, *BuildOptions) error) *cobra.Command {
	opts := &BuildOptions{IO: f.IOStreams, Engine: f.Engine}
	cmd := &cobra.Command{
		Use:   "build [sandbox|common|browser|all]...",
		Short: "Build the image of a bundled profile",
		Long: `Build the image of each named profile (default: sandbox) from the Dockerfiles embedded
in sbx; "all" builds all three. Building an existing image rebuilds it: unchanged steps
come from the engine's cache unless --no-cache. The common and browser images are built on
the sandbox image, which is built first when it is missing or stale.

Progress goes to stderr: --progress auto shows a live view on a terminal and one line per
step otherwise, plain streams the whole build log, json the engine's messages one per line.

RUN steps install Debian packages, so the build needs to reach a Debian mirror. Use
--network host when the engine's bridge network has no way out: a daemon run with
--iptables=false (no NAT for its bridge), or a firewall or VPN that lets the host itself
through but not Docker's bridge. The steps then share the host's network, which is fine for
sbx's own Dockerfiles but is why it is not the default.`,
		Example: `  sbx image build
  sbx image build all --progress plain
  sbx image build common --network host`,
		ValidArgs: append(slices.Clone(images.Profiles), "all"),
		RunE: func(cmd *cobra.Command, args []string) error {
			profiles, err := parseProfiles(args)
			if err != nil {
				return err
			}
			opts.Profiles = profiles
			if !slices.Contains(cmdutil.ProgressModes, opts.Progress) {
				return errs.Usagef("invalid --progress %q", opts.Progress).
					WithHint("choose one of " + strings.Join(cmdutil.ProgressModes, ", "))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return buildRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.NoCache, "no-cache", false, "run every step again instead of using the engine's build cache")
	fl.StringVar(&opts.Network, "network", "", "`network` for RUN steps (default: the engine's bridge); \"host\" when the bridge cannot reach a mirror")
	fl.StringVar(&opts.Progress, "progress", cmdutil.ProgressAuto, "progress `mode`: auto, plain or json")
	return cmd
}

// parseProfiles turns the arguments into the profiles to build, in build order.
func parseProfiles(args []string) ([]string, error) {
	if len(args) == 0 {
		return []string{images.ProfileSandbox}, nil
	}
	want := map[string]bool{}
	for _, a := range args {
		switch _, ok := images.TagFor(a); {
		case a == "all":
			for _, p := range images.Profiles {
				want[p] = true
			}
		case ok:
			want[a] = true
		default:
			return nil, errs.Usagef("unknown profile %q", a).
				WithHint("choose sandbox, common, browser or all")
		}
	}
	var profiles []string
	for _, p := range images.Profiles {
		if want[p] {
			profiles = append(profiles, p)
		}
	}
	return profiles, nil
}

func buildRun(ctx context.Context, opts *BuildOptions) error {
	eng, err := opts.Engine(ctx)
	if err != nil {
		return err
	}
	imgs := &imagebuild.Images{Engine: eng, Files: opts.Files}
	progress := &cmdutil.BuildProgress{Out: opts.IO.ErrOut, Mode: opts.Progress, TTY: opts.IO.IsStderrTTY(), Quiet: opts.IO.Quiet()}
	for _, profile := range opts.Profiles {
		if _, err := imgs.Build(ctx, profile, imagebuild.BuildOptions{NoCache: opts.NoCache, Network: opts.Network, Progress: progress.Show}); err != nil {
			return err
		}
	}
	return nil
}
