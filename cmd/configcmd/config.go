// Package configcmd implements "sbx config init" and "sbx config schema".
package configcmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// NewCmdConfig builds "sbx config" and its subcommands.
func NewCmdConfig(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config <command>",
		Short: "Write a commented project config, or print the config file's JSON Schema",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(NewCmdInit(f, nil), NewCmdSchema(f, nil))
	return cmd
}

// InitOptions are the inputs of "sbx config init".
type InitOptions struct {
	IO *iostreams.IOStreams
	// ProjectRoot finds where .sbx.yaml goes: --project, else the project root sbx would use.
	ProjectRoot func() (string, error)
	Force       bool
}

// NewCmdInit builds "sbx config init".
func NewCmdInit(f *cmdutil.Factory, runF func(context.Context, *InitOptions) error) *cobra.Command {
	opts := &InitOptions{IO: f.IOStreams, ProjectRoot: func() (string, error) {
		wd, err := f.WorkingDir()
		if err != nil {
			return "", err
		}
		root, _, _, err := config.FindProjectRoot(wd, f.Global.ProjectDir, config.Discovery{})
		return root, err
	}}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Write a commented .sbx.yaml listing every key with its default",
		Long: `Write .sbx.yaml at the project root (--project, else the nearest directory holding one,
else the git top-level, else the working directory). Every key is listed, commented out,
with its default and a one-line description, so the file changes nothing until you
uncomment a line. An existing file is kept unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return initRun(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Force, "force", false, "overwrite an existing .sbx.yaml")
	return cmd
}

func initRun(opts *InitOptions) error {
	root, err := opts.ProjectRoot()
	if err != nil {
		return errs.Usagef("finding the project root: %w", err).WithHint("pass --project with an existing directory")
	}
	path := filepath.Join(root, config.ProjectFileName)
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if opts.Force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	file, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return errs.New(fmt.Errorf("%s already exists", path), errs.CodeError, "pass --force to overwrite it, or edit it")
	}
	if err != nil {
		return errs.Failure(fmt.Errorf("writing %s: %w", path, err), "")
	}
	_, werr := file.WriteString(config.InitTemplate())
	if cerr := file.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return errs.Failure(fmt.Errorf("writing %s: %w", path, werr), "")
	}
	opts.IO.Progressf("wrote %s; sbx explain shows the resolved config\n", path)
	return nil
}

// SchemaOptions are the inputs of "sbx config schema".
type SchemaOptions struct {
	IO *iostreams.IOStreams
}

// NewCmdSchema builds "sbx config schema".
func NewCmdSchema(f *cmdutil.Factory, runF func(context.Context, *SchemaOptions) error) *cobra.Command {
	opts := &SchemaOptions{IO: f.IOStreams}
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of sbx config files, for editors",
		Long: `Print a JSON Schema (draft 2020-12) of .sbx.yaml and ~/.config/sbx/config.yaml. With the
YAML language server, add this first line to .sbx.yaml:
  # yaml-language-server: $schema=/path/to/sbx.schema.json`,
		Example: `  sbx config schema > ~/.config/sbx/schema.json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			_, err := opts.IO.Out.Write(config.JSONSchema())
			return err
		},
	}
}
