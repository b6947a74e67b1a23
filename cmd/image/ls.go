package image

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/docker/go-units"
	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// LsOptions are the inputs of "sbx image ls".
type LsOptions struct {
	IO     *iostreams.IOStreams
	Engine func(context.Context) (engine.Engine, error)
	// Files holds the Dockerfiles; nil means the embedded ones.
	Files fs.FS
	Now   func() time.Time
	JSON  bool
}

// NewCmdLs builds "sbx image ls".
func NewCmdLs(f *cmdutil.Factory, runF func(context.Context, *LsOptions) error) *cobra.Command {
	opts := &LsOptions{IO: f.IOStreams, Engine: f.Engine, Now: f.Now}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the bundled images, whether they are built and current, and the images of setup",
		Long: `List each bundled profile's image with its status, size and age. The status is
  present  built from the Dockerfiles this sbx bundles
  missing  not built yet; the first sandbox of the profile builds it
  stale    built from other Dockerfiles (an older sbx, say); rebuild with sbx image build
Then the images sbx derived for setup (profile "setup"), each with the image it was built
on and what it installs; sbx image prune removes those no container uses.

On a terminal this is a table. Piped, it is tab-separated without a header, one image a
line: profile, tag, status, size in bytes, creation time (RFC 3339, empty when missing),
image ID, and for a derived image the image it came from. --json prints an array of objects
with the fields profile, tag, status, id, size (bytes), created, dockerfileHash (of the
bundled Dockerfiles), imageHash (the image's dev.sbx.dockerfile-hash label) and detail (why
it is stale); a derived image has profile "", from (the configured image it was built on)
and setup (apt, npm, pip, run).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return lsRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func lsRun(ctx context.Context, opts *LsOptions) error {
	eng, err := opts.Engine(ctx)
	if err != nil {
		return err
	}
	imgs := &imagebuild.Images{Engine: eng, Files: opts.Files}
	list, err := imgs.List(ctx)
	if err != nil {
		return err
	}
	derived, err := imgs.Derived(ctx)
	if err != nil {
		return err
	}
	for _, d := range derived {
		setup := d.Setup
		list = append(list, imagebuild.ImageStatus{Tag: d.Tag, State: imagebuild.ImagePresent, ID: d.ID, Size: d.Size, Created: d.Created, From: d.From, Setup: &setup})
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, list)
	}
	if !opts.IO.IsStdoutTTY() {
		for _, st := range list {
			created := ""
			if !st.Created.IsZero() {
				created = st.Created.UTC().Format(time.RFC3339)
			}
			line := fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s", st.Profile, st.Tag, st.State, st.Size, created, st.ID)
			if st.Setup != nil {
				line = fmt.Sprintf("setup\t%s\t%s\t%d\t%s\t%s\t%s", st.Tag, st.State, st.Size, created, st.ID, cmdutil.SafeText(st.From))
			}
			fmt.Fprintln(opts.IO.Out, line)
		}
		return nil
	}
	printTable(opts, list)
	return nil
}

func printTable(opts *LsOptions, list []imagebuild.ImageStatus) {
	colors := map[string]lipgloss.Color{imagebuild.ImagePresent: "2", imagebuild.ImageStale: "3", imagebuild.ImageMissing: "1"}
	rows := make([][]string, 0, len(list))
	var notes []string
	for _, st := range list {
		size, age, id := "-", "-", "-"
		if st.State != imagebuild.ImageMissing {
			size = units.HumanSizeWithPrecision(float64(st.Size), 3)
			id = strings.TrimPrefix(st.ID, "sha256:")[:min(12, len(strings.TrimPrefix(st.ID, "sha256:")))]
			if !st.Created.IsZero() {
				age = units.HumanDuration(opts.Now().Sub(st.Created)) + " ago"
			}
		}
		profile := st.Profile
		if st.Setup != nil {
			profile = "setup"
			notes = append(notes, fmt.Sprintf("%s: %s", st.Tag, cmdutil.SafeText(describeSetup(st.From, *st.Setup))))
		}
		rows = append(rows, []string{profile, st.Tag, st.State, size, age, id})
		switch st.State {
		case imagebuild.ImageStale:
			notes = append(notes, fmt.Sprintf("%s is stale: %s; rebuild it with: sbx image build %s", st.Profile, st.Detail, st.Profile))
		case imagebuild.ImageMissing:
			notes = append(notes, fmt.Sprintf("%s is missing: its first sandbox builds it, or build it now with: sbx image build %s", st.Profile, st.Profile))
		}
	}
	header := lipgloss.NewStyle().Bold(opts.IO.ColorEnabled())
	last := len(rows[0]) - 1
	t := table.New().
		Border(lipgloss.HiddenBorder()).
		BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).
		BorderColumn(false).BorderHeader(false).
		Headers("PROFILE", "TAG", "STATUS", "SIZE", "CREATED", "IMAGE ID").
		Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			style := lipgloss.NewStyle()
			if col < last {
				style = style.PaddingRight(2)
			}
			switch {
			case row == table.HeaderRow:
				return style.Inherit(header)
			case col == 2 && opts.IO.ColorEnabled():
				return style.Foreground(colors[rows[row][2]])
			}
			return style
		})
	// The table pads every cell to its column's width, the last one too.
	for _, line := range strings.Split(strings.TrimRight(t.Render(), "\n"), "\n") {
		fmt.Fprintln(opts.IO.Out, strings.TrimRight(line, " "))
	}
	for _, n := range notes {
		fmt.Fprintln(opts.IO.ErrOut, n)
	}
}

// describeSetup says in a line what a derived image installs on what.
func describeSetup(from string, s config.Setup) string {
	var parts []string
	for _, l := range []struct {
		name string
		list []string
	}{{"apt", s.Apt}, {"npm", s.Npm}, {"pip", s.Pip}} {
		if len(l.list) > 0 {
			parts = append(parts, l.name+" "+strings.Join(l.list, " "))
		}
	}
	if n := len(s.Run); n > 0 {
		parts = append(parts, fmt.Sprintf("%d command(s)", n))
	}
	return "setup of " + from + ": " + strings.Join(parts, "; ")
}
