// Package mcp implements "sbx mcp".
package mcp

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/internal/procs"
	"github.com/sbx-sandbox/sbx/pkg/buildinfo"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/mcpserver"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// MCPOptions are the inputs of "sbx mcp".
type MCPOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	Name    string
	Rm      bool
}

// NewCmdMCP builds "sbx mcp".
func NewCmdMCP(f *cmdutil.Factory, runF func(context.Context, *MCPOptions) error) *cobra.Command {
	opts := &MCPOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "mcp [-n NAME]",
		Short: "Serve a sandbox to AI agents over the Model Context Protocol (stdio)",
		Long: `Serve the Model Context Protocol on stdin and stdout, so an agent (Claude Desktop, Claude
Code, or any MCP client) can work in a sandbox (the project's default one, or -n NAME)
instead of on your machine. Register "sbx mcp" as a stdio server; see the README.

Tools: exec, shell (a persistent shell session, as sbx sh), run, read_file, write_file,
list_files, start_process, list_processes, process_output, kill_process and explain. Each is gated by the tool policy (tools.allow and
tools.deny: exec, read, write), and each description states the sandbox's resolved limits.
The sandbox is created on the first call that needs it. Messages go to stderr; stdout
carries only the protocol. The server answers what it was asked, then ends, when its client closes stdin.

With --rm the server uses a fresh sandbox (one per agent session) and removes it, with its
volume, network and state, when it ends: the client closing stdin, Ctrl-C or SIGTERM.`,
		Example: `  sbx mcp
  sbx mcp -n agent --project ~/src/app
  sbx mcp --rm`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Rm && opts.Name != "" {
				return errs.Usagef("--rm cannot be combined with -n").WithHint("--rm serves a fresh sandbox and removes it when the client goes away")
			}
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, mcpRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.Rm, "rm", false, "serve a fresh sandbox, removed with its volume, network and state when the server ends")
	return cmd
}

func mcpRun(ctx context.Context, opts *MCPOptions) error {
	procs.All() // a server an agent talks to for a session
	f := opts.Factory
	name, ensure, done, err := cmdutil.SandboxFor(f, opts.Name, opts.Rm)
	if err != nil {
		return err
	}
	defer done(ctx)
	r, err := cmdutil.ResolveConfig(f, name)
	if err != nil {
		return err
	}
	if r.ExecsOnHost() {
		return cmdutil.HostModeError(r)
	}
	// The forwards forward_port starts end when the server does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := mcpserver.New(mcpserver.Options{
		Resolved: r,
		Sandbox: func(ctx context.Context) (*sandbox.Manager, *sandbox.Sandbox, func(), error) {
			return ensure(ctx, f, r)
		},
		Env:      cmdutil.PassEnv(f, r),
		WorkDir:  cmdutil.WorkDir("", r),
		Version:  buildinfo.Get().Version,
		Now:      f.Now,
		Umask:    uint32(f.Umask()),
		Lifetime: ctx,
	})
	err = srv.Run(ctx, mcpserver.StdioTransport(opts.IO.In, opts.IO.Out))
	if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
		// The client closed stdin, or sbx was told to stop: both are a normal end.
		return nil
	}
	return errs.Failure(err, "")
}
