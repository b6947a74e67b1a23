// Package diff implements "sbx diff".
package diff

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/workspace"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
	"github.com/sbx-sandbox/sbx/pkg/protect"
)

// DiffOptions are the inputs of "sbx diff".
type DiffOptions struct {
	IO       *iostreams.IOStreams
	Factory  *cmdutil.Factory
	Name     string
	Paths    []string
	Stat     bool
	NameOnly bool
	JSON     bool
	Digest   bool
}

// NewCmdDiff builds "sbx diff".
func NewCmdDiff(f *cmdutil.Factory, runF func(context.Context, *DiffOptions) error) *cobra.Command {
	opts := &DiffOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "diff [-n NAME] [--stat | --name-only | --json | --digest] [PATH...]",
		Short: "Show what an overlay sandbox changed in the project",
		Long: `Show what a sandbox with workspace overlay changed against the project on the host:
added, modified, deleted and renamed files, mode changes, binary files. The default output
is a unified diff that git apply accepts; --stat counts lines per file, --name-only lists
paths, --json lists every change with its status, kind, modes, whether it is binary,
protected (apply skips it) or in conflict (the host changed the path since the sandbox
was created), and a link's target. Protected are what protectedPaths covers, anything git
obeys (.git directories and files, .gitmodules, .gitattributes, at any depth; what the
project's git configs name as hooks or includes; a directory laid out as a repository) and
links that leave the project. Notes on stderr name them, directories added and permission
changes. PATHs keep only changes at or under them.

A running sandbox is paused while its changes are read, so what is shown is one state of
it. The last line on stderr is the change set's digest: sbx apply --expect DIGEST (with the
same PATHs) writes exactly what was shown, or nothing. A file over 256 MiB is named in the
patch ("Binary files ... differ"), never streamed.`,
		Example: `  sbx diff
  sbx diff --stat
  sbx diff | git apply --check`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			n := 0
			for _, b := range []bool{opts.Stat, opts.NameOnly, opts.JSON, opts.Digest} {
				if b {
					n++
				}
			}
			if n > 1 {
				return errs.Usagef("--stat, --name-only, --json and --digest go one at a time")
			}
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, diffRun)
		},
	}
	cmdutil.NameFlag(cmd.Flags(), &opts.Name)
	cmd.Flags().BoolVar(&opts.Stat, "stat", false, "count added and deleted lines per file")
	cmd.Flags().BoolVar(&opts.NameOnly, "name-only", false, "list the changed paths")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "list the changes as a JSON array")
	cmd.Flags().BoolVar(&opts.Digest, "digest", false, "print only the change set's digest (for sbx apply --expect)")
	return cmd
}

func diffRun(ctx context.Context, opts *DiffOptions) error {
	l, r, err := cmdutil.OverlaySandbox(ctx, opts.Factory, opts.Name)
	if err != nil {
		return err
	}
	m, err := cmdutil.Manager(ctx, opts.Factory)
	if err != nil {
		return err
	}
	// Paused while read, so what is shown, and its digest, is one state of the sandbox.
	unfrozen, err := workspace.New(m).Frozen(ctx, r.Name, func() error { return show(opts, l, r.Config.ProtectedPaths) })
	if unfrozen != "" {
		opts.IO.Progressf("warning: %s; sbx apply --expect still refuses any other change set\n", unfrozen)
	}
	return err
}

func show(opts *DiffOptions, l overlay.Layers, protectedPaths []string) error {
	changes, err := l.Changes(protectedPaths, opts.Paths)
	if err != nil {
		return err
	}
	digest, err := l.Digest(changes)
	if err != nil {
		return err
	}
	out := opts.IO.Out
	switch {
	case opts.Digest:
		fmt.Fprintln(out, digest)
		return nil
	case opts.JSON:
		if changes == nil {
			changes = []overlay.Change{}
		}
		if err := cmdutil.WriteJSON(out, changes); err != nil {
			return err
		}
	case opts.NameOnly:
		w := bufio.NewWriter(out)
		for _, c := range changes {
			fmt.Fprintln(w, overlay.Quote(c.Path))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	case opts.Stat:
		if err := printStat(out, l, changes); err != nil {
			return err
		}
	default:
		var term *printable
		if opts.IO.IsStdoutTTY() {
			// What the sandbox wrote is shown, never obeyed: no control character, and no
			// bidirectional override (Trojan Source), reaches a terminal.
			term = &printable{w: out}
			out = term
		}
		if err := l.Patch(out, changes); err != nil {
			return err
		}
		if term != nil {
			if err := term.flush(); err != nil {
				return err
			}
		}
		notes(opts.IO, changes)
	}
	if len(changes) > 0 {
		opts.IO.Progressf("change set %s (sbx apply --expect %s writes exactly this)\n", digest, digest)
	}
	return nil
}

// notes says on stderr what a unified diff cannot carry or a reviewer must not miss:
// conflicts, protected paths (links leaving the project with their targets), directories
// added, and permission changes.
func notes(io *iostreams.IOStreams, changes []overlay.Change) {
	for _, c := range changes {
		name := overlay.Quote(c.Path)
		switch {
		case c.Conflict != "":
			io.Progressf("conflict: %s: %s\n", name, c.Conflict)
		case c.Protected == protect.ReasonLink:
			io.Progressf("protected: %s -> %s, outside the project: sbx apply skips it without --include-protected\n", name, overlay.Quote(c.Target))
		case c.Protected != "":
			io.Progressf("protected: %s (by %s): sbx apply skips it without --include-protected\n", name, c.Protected)
		}
		switch {
		case c.Kind == overlay.KindDir && c.Status == overlay.Added:
			io.Progressf("directory added: %s (mode %s)\n", name, c.NewMode)
		case c.OldMode != "" && c.NewMode != "" && c.OldMode != c.NewMode:
			io.Progressf("mode changed: %s %s -> %s\n", name, c.OldMode, c.NewMode)
		}
	}
}

func printStat(out io.Writer, l overlay.Layers, changes []overlay.Change) error {
	stats, err := l.Stats(changes)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	adds, dels := 0, 0
	for i, c := range changes {
		name := overlay.Quote(c.Path)
		if c.Status == overlay.Renamed {
			name = overlay.Quote(c.OldPath) + " => " + name
		}
		switch {
		case c.Binary:
			fmt.Fprintf(w, " %s | %s (binary, %d bytes)\n", name, c.Status, c.Size)
		default:
			fmt.Fprintf(w, " %s | %s +%d -%d\n", name, c.Status, stats[i].Added, stats[i].Deleted)
		}
		adds += stats[i].Added
		dels += stats[i].Deleted
	}
	fmt.Fprintf(w, " %d changes, %d insertions(+), %d deletions(-)\n", len(changes), adds, dels)
	return w.Flush()
}

// printable writes a patch for a terminal: each line as cmdutil.SafeText shows it (C0 and C1
// controls, bidirectional overrides, bytes that are not UTF-8 escaped), its tabs kept. A line
// is held until its newline, so no character is split; flush writes the rest.
type printable struct {
	w    io.Writer
	line []byte
}

func (p *printable) Write(b []byte) (int, error) {
	p.line = append(p.line, b...)
	i := bytes.LastIndexByte(p.line, '\n')
	if i < 0 {
		return len(b), nil
	}
	if err := p.emit(p.line[:i+1]); err != nil {
		return 0, err
	}
	p.line = append(p.line[:0], p.line[i+1:]...)
	return len(b), nil
}

func (p *printable) flush() error {
	err := p.emit(p.line)
	p.line = p.line[:0]
	return err
}

func (p *printable) emit(text []byte) error {
	if len(text) == 0 {
		return nil
	}
	var b strings.Builder
	for i, line := range strings.Split(string(text), "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		for j, field := range strings.Split(line, "\t") {
			if j > 0 {
				b.WriteByte('\t')
			}
			b.WriteString(cmdutil.SafeText(field))
		}
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}
