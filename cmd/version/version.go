// Package version implements "sbx version".
package version

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/buildinfo"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// VersionOptions are the inputs of "sbx version".
type VersionOptions struct {
	IO     *iostreams.IOStreams
	Engine func(context.Context) (engine.Engine, error)
	JSON   bool
	Client bool
}

// Report is the --json output of "sbx version".
type Report struct {
	Client buildinfo.Info `json:"client"`
	Engine *EngineVersion `json:"engine"`
	// EngineError says why the engine part is missing.
	EngineError string `json:"engineError,omitempty"`
}

// EngineVersion describes the engine that answered.
type EngineVersion struct {
	Endpoint      string `json:"endpoint"`
	Version       string `json:"version"`
	APIVersion    string `json:"apiVersion"`
	ClientAPI     string `json:"negotiatedApiVersion"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
	KernelVersion string `json:"kernelVersion"`
}

// NewCmdVersion builds "sbx version".
func NewCmdVersion(f *cmdutil.Factory, runF func(context.Context, *VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{IO: f.IOStreams, Engine: f.Engine}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the sbx version and, when it answers, the engine's",
		Long: `Show sbx's version, commit and Go version. When the Docker engine answers, its version
and API version follow. When it does not, the client part still prints and the command
fails with exit 125; --client never contacts the engine.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return versionRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&opts.Client, "client", false, "show only the client version (never contacts the engine)")
	return cmd
}

func versionRun(ctx context.Context, opts *VersionOptions) error {
	rep := Report{Client: buildinfo.Get()}
	var engineErr error
	if !opts.Client {
		rep.Engine, engineErr = engineVersion(ctx, opts)
	}
	if engineErr != nil {
		rep.EngineError = engineErr.Error()
	}
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, rep); err != nil {
			return err
		}
		return engineErr
	}
	out := opts.IO.Out
	fmt.Fprintf(out, "Client:\n  Version:     %s\n  Commit:      %s\n  Go version:  %s\n  OS/Arch:     %s\n",
		rep.Client.Version, rep.Client.Commit, rep.Client.GoVersion, rep.Client.Platform)
	if e := rep.Engine; e != nil {
		fmt.Fprintf(out, "Engine:\n  Endpoint:    %s\n  Version:     %s\n  API version: %s (negotiated %s)\n  OS/Arch:     %s/%s\n  Kernel:      %s\n",
			e.Endpoint, e.Version, e.APIVersion, e.ClientAPI, e.OS, e.Arch, e.KernelVersion)
	}
	return engineErr
}

func engineVersion(ctx context.Context, opts *VersionOptions) (*EngineVersion, error) {
	eng, err := opts.Engine(ctx)
	if err != nil {
		return nil, err
	}
	v, err := eng.ServerVersion(ctx)
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("asking the engine at %s for its version: %w", eng.DaemonHost(), err), "")
	}
	return &EngineVersion{Endpoint: eng.DaemonHost(), Version: v.Version, APIVersion: v.APIVersion,
		ClientAPI: eng.ClientVersion(), OS: v.Os, Arch: v.Arch, KernelVersion: v.KernelVersion}, nil
}
