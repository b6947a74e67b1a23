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
		Short:   "List the bundled images and whether they are built and current",
		Long: `List each bundled profile's image with its status, size and age. The status is
  present  built from the Dockerfiles this sbx bundles
  missing  not built yet; the first sandbox of the profile builds it
  stale    built from other Dockerfiles (an older sbx, say); rebuild with sbx image build

On a terminal this is a table. Piped, it is tab-separated without a header, one image a
line: profile, tag, status, size in bytes, creation time (RFC 3339, empty when missing),
image ID. --json prints an array of objects with the fields profile, tag, status, id, size
(bytes), created, dockerfileHash (of the bundled Dockerfiles), imageHash (the image's
dev.sbx.dockerfile-hash label) and detail (why it is stale).`,
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
	list, err := (&imagebuild.Images{Engine: eng, Files: opts.Files}).List(ctx)
	if err != nil {
		return err
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
			fmt.Fprintf(opts.IO.Out, "%s\t%s\t%s\t%d\t%s\t%s\n", st.Profile, st.Tag, st.State, st.Size, created, st.ID)
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
		rows = append(rows, []string{st.Profile, st.Tag, st.State, size, age, id})
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
