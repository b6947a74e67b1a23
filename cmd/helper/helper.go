// Package helper implements "sbx helper", the work sbx runs in its own helper containers
// (sandbox.HelperImage), never by hand.
package helper

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
)

// NewCmdHelper builds the hidden "sbx helper".
func NewCmdHelper(_ *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "helper",
		Short:  "Work sbx runs in its own helper containers",
		Hidden: true,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "clear-workdir DIR",
		Short: "Remove overlayfs's work/work under DIR (sbx rm runs it as root for a user who is not)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Inside DIR only: the root's name resolution never leaves it, links included.
			root, err := os.OpenRoot(args[0])
			if err != nil {
				return err
			}
			defer root.Close()
			if err := root.RemoveAll(filepath.Join("work", "work")); err != nil {
				return fmt.Errorf("removing work/work: %w", err)
			}
			return nil
		},
	})
	return cmd
}
