// Package image implements "sbx image" and its subcommands, which build and list the
// images of sbx's bundled profiles.
package image

import (
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
)

// NewCmdImage builds "sbx image".
func NewCmdImage(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image <command>",
		Short: "Build and list the bundled sandbox images and the images of setup",
		Long: `sbx bundles one image per profile, built locally from Dockerfiles embedded in sbx:
  sandbox   sbx-sandbox:bookworm-slim          Debian with bash, git, curl, jq, python3, ripgrep
  common    sbx-sandbox-common:bookworm-slim   sandbox plus Node.js, Go, Rust, Java, a C toolchain
  browser   sbx-sandbox-browser:bookworm-slim  sandbox plus Chromium, Xvfb, x11vnc and noVNC

A profile's image is built on first use; "sbx image build" builds or rebuilds it ahead of
time. An image is stale when it was built from other Dockerfiles than this sbx bundles
(after an upgrade of sbx, say); stale images are used as they are until rebuilt.

A sandbox with setup runs an image derived from its configured one, built on first use and
tagged sbx-derived:HASH by its inputs; "sbx image ls" lists them with what they came from and
"sbx image prune" removes those no container uses.`,
	}
	cmd.AddCommand(NewCmdBuild(f, nil), NewCmdLs(f, nil), NewCmdPrune(f, nil))
	return cmd
}
