// Package cp implements "sbx cp".
package cp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/internal/procs"
	"github.com/sbx-sandbox/sbx/pkg/archive"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/transfer"
)

// CpOptions are the inputs of "sbx cp".
type CpOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory

	Args       archive.CopyArgs
	Archive    bool // -a: keep uid/gid on copies into the sandbox
	FollowLink bool // -L: follow SRC itself when it is a symlink
	JSON       bool
	// Caps on copies out of a sandbox; 0 means archive's default.
	MaxBytes   int64
	MaxEntries int
	MaxDepth   int
}

// Summary is the --json output of "sbx cp". Field names are stable.
type Summary struct {
	Direction  string `json:"direction"` // "in" (host to sandbox) or "out" (sandbox to host)
	Sandbox    string `json:"sandbox"`
	Src        string `json:"src"` // absolute host path, absolute sandbox path, or "-"
	Dst        string `json:"dst"`
	Files      int    `json:"files"`
	Dirs       int    `json:"dirs"`
	Symlinks   int    `json:"symlinks"`
	Bytes      int64  `json:"bytes"` // file content bytes
	DurationMS int64  `json:"durationMs"`
}

// NewCmdCp builds "sbx cp".
func NewCmdCp(f *cmdutil.Factory, runF func(context.Context, *CpOptions) error) *cobra.Command {
	opts := &CpOptions{IO: f.IOStreams, Factory: f}
	var maxBytes string
	cmd := &cobra.Command{
		Use:   "cp [flags] SRC DST",
		Short: "Copy files between the host and a sandbox",
		Long: `Copy a file or directory into or out of a sandbox. A sandbox path is NAME:PATH, or :PATH
for the project's sandbox; relative sandbox paths start at /workspace. Exactly one side is a
sandbox. As with docker cp, a trailing / says the path is a directory, DIR/. copies what is
inside DIR, and - is a tar stream on stdin (SRC, extracted into the directory DST) or stdout
(DST). A sandbox named with NAME: must exist (sbx create -n NAME makes one); the project's
sandbox (:PATH) is created and started when needed, as exec does.

Copies go through the running sandbox, as its user, so /tmp and other tmpfs mounts, a none
workspace and a rw workspace all work, and the sandbox's own permissions apply. What a copy
writes appears complete or not at all, on both sides; a killed copy's staging directory
(.sbx-cp-*) is removed by the next copy into the same directory.

Into a sandbox: files belong to the sandbox user and lose setuid/setgid bits. With -a the
host uid/gid are kept, which works only for files the sandbox user may own: the sandbox has
no capabilities, so it cannot give files to anyone else, and such a copy fails whole.

Out of a sandbox, its tar stream is untrusted: symlinks, devices, FIFOs and absolute or
escaping names are refused, naming the entry, and nothing is written (hardlinked files
arrive as separate files). Setuid/setgid/sticky bits and owners are dropped, and your umask
applies to what is created. --max-bytes, --max-entries and --max-depth cap what a sandbox
can make sbx write.

A sandbox may write in the project (a rw workspace) and in writable binds, so on the host
side no symbolic link inside those directories is followed: a DST that is, or lies below,
such a link is refused, naming it. Links elsewhere on the way to DST (say ~/link/dir) are
yours and are followed.`,
		Example: `  sbx cp data.csv :/tmp/
  sbx cp ./src/. web:/workspace/src
  sbx cp :/tmp/results ./results
  tar -c dir | sbx cp - :/tmp
  sbx cp :/workspace/out - | tar -t`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := archive.ParseCopyArgs(args[0], args[1])
			if err != nil {
				return err
			}
			opts.Args = a
			box := a.Dst
			if !a.Into() {
				box = a.Src
			}
			if box.Sandbox != "" {
				if err := config.ValidName(box.Sandbox); err != nil {
					return errs.Usagef("%v", err)
				}
			}
			fl := cmd.Flags()
			if a.Into() {
				for _, name := range []string{"max-bytes", "max-entries", "max-depth"} {
					if fl.Changed(name) {
						return errs.Usagef("--%s caps copies out of a sandbox; this one goes into it", name)
					}
				}
			} else if opts.Archive {
				return errs.Usagef("-a/--archive keeps owners on copies into a sandbox; copies out always belong to you")
			}
			if a.Dst.Stream && opts.JSON {
				return errs.Usagef("--json cannot share stdout with the tar stream of DST -")
			}
			if opts.MaxBytes, err = config.ParseSize(maxBytes); err != nil || opts.MaxBytes <= 0 {
				return errs.Usagef("bad --max-bytes %q: want a size such as 1g or 500m", maxBytes)
			}
			if opts.MaxEntries <= 0 || opts.MaxDepth <= 0 {
				return errs.Usagef("--max-entries and --max-depth must be positive")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return cpRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&opts.Archive, "archive", "a", false, "keep host uid/gid on copies in (only ones the sandbox user may give: it has no capabilities)")
	fl.BoolVarP(&opts.FollowLink, "follow-link", "L", false, "follow SRC itself when it is a symlink")
	fl.BoolVar(&opts.JSON, "json", false, "print a summary as JSON")
	fl.StringVar(&maxBytes, "max-bytes", "1g", "copies out: at most this many `bytes` of file data")
	fl.IntVar(&opts.MaxEntries, "max-entries", archive.DefaultMaxEntries, "copies out: at most this many archive `entries`")
	fl.IntVar(&opts.MaxDepth, "max-depth", archive.DefaultMaxDepth, "copies out: at most this many path `levels`")
	return cmd
}

func cpRun(ctx context.Context, opts *CpOptions) error {
	procs.All() // reading, packing and sending run side by side
	f, a := opts.Factory, opts.Args
	into := a.Into()
	box, host, tool := a.Dst, a.Src, "write"
	if !into {
		box, host, tool = a.Src, a.Dst, "read"
	}
	r, err := cmdutil.ResolveConfig(f, box.Sandbox)
	if err != nil {
		return err
	}
	if err := config.CheckTool(r, tool); err != nil {
		return err
	}
	if r.ExecsOnHost() {
		return errs.New(fmt.Errorf("sandbox %q is not in use: mode %s (from %s) runs commands on the host", r.Name, r.Config.Mode, r.Source("mode")),
			errs.CodeError, "copy with cp on the host, or set mode: all to use the sandbox")
	}
	guarded := guardedDirs(r)
	hostPath, err := checkHostSide(opts, host, into, guarded)
	if err != nil {
		return err
	}

	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return err
	}
	sb, release, err := ensureSandbox(ctx, opts, m, r)
	if err != nil {
		return err
	}
	defer release()
	_ = m.State.Touch(r.Name)

	var bar *progressBar
	if opts.IO.IsStderrTTY() && !opts.IO.Quiet() {
		arrow := "→"
		if !into {
			arrow = "←"
		}
		bar = startProgress(opts.IO.ErrOut, f.Now, fmt.Sprintf("%s %s:%s", arrow, r.Name, box.Path))
		defer bar.finish()
	}
	var progress func(archive.Stats)
	if bar != nil {
		progress = bar.update
	}
	var res *transfer.Result
	if into {
		in := transfer.InOptions{Dst: box.Path, DstIsDir: box.TrailingSlash || box.Contents,
			Src: hostPath, Contents: host.Contents, FollowLink: opts.FollowLink, KeepOwner: opts.Archive}
		if host.Stream {
			in.Stream = opts.IO.In
		} else if bar != nil {
			bar.setTotals(hostTotals(hostPath, opts.FollowLink))
		}
		in.Progress = progress
		res, err = transfer.New(m).In(ctx, sb, in)
	} else {
		out := transfer.OutOptions{Src: box.Path, SrcIsDir: box.TrailingSlash, Contents: box.Contents,
			FollowLink: opts.FollowLink, Dst: hostPath, Guarded: guarded, Umask: f.Umask(),
			MaxBytes: opts.MaxBytes, MaxEntries: opts.MaxEntries, MaxDepth: opts.MaxDepth, Progress: progress}
		if host.Stream {
			out.Stream = opts.IO.Out
		}
		if bar != nil {
			out.Totals = bar.setTotals
		}
		res, err = transfer.New(m).Out(ctx, sb, out)
	}
	bar.finish()
	_ = m.State.Touch(r.Name)
	if err != nil {
		return explainCopyError(err, r, sb)
	}
	return report(opts, r.Name, into, box, hostPath, res)
}

// guardedDirs are the host directories r's sandbox may write to, where a copy out follows
// no link: the project, whatever the workspace mode (a link a rw sandbox made outlives it,
// and the mode may have been rw before), and writable binds. transfer's Copier.Out adds the
// binds the sandbox really has.
func guardedDirs(r *config.Resolved) []string {
	dirs := []string{r.ProjectRoot}
	for _, b := range r.Config.Binds {
		if !b.ReadOnly {
			dirs = append(dirs, b.Source)
		}
	}
	return dirs
}

// checkHostSide checks the host side before the engine is dialled and returns its absolute
// path ("" for a stream), spelled so archive.Extract sees a trailing / or /. as written.
func checkHostSide(opts *CpOptions, host archive.Location, into bool, guarded []string) (string, error) {
	switch {
	case host.Stream && into && opts.IO.IsStdinTTY():
		return "", errs.Usagef("SRC - reads a tar stream from stdin, which is a terminal").
			WithHint("pipe a tar stream in: tar -c DIR | sbx cp - NAME:PATH")
	case host.Stream && !into && opts.IO.IsStdoutTTY():
		return "", errs.Usagef("DST - writes a tar stream to stdout, which is a terminal").
			WithHint("redirect it: sbx cp NAME:PATH - > out.tar")
	case host.Stream:
		return "", nil
	}
	p := host.Path
	if !filepath.IsAbs(p) {
		wd, err := opts.Factory.WorkingDir()
		if err != nil {
			return "", err
		}
		p = filepath.Join(wd, p)
	}
	if into {
		stat := os.Lstat
		if opts.FollowLink || host.TrailingSlash {
			stat = os.Stat
		}
		fi, err := stat(p)
		if err != nil {
			return "", err
		}
		if (host.TrailingSlash || host.Contents) && !fi.IsDir() {
			return "", fmt.Errorf("%s is not a directory", p)
		}
		if err := archive.CheckSource(p, guarded, opts.FollowLink || host.TrailingSlash || host.Contents); err != nil {
			return "", err
		}
		return p, nil
	}
	switch {
	case host.Contents:
		p += string(filepath.Separator) + "."
	case host.TrailingSlash:
		p += string(filepath.Separator)
	}
	// The placement rules of Extract, checked now: a missing parent or a link a sandbox may
	// have made fails before any work.
	if err := archive.CheckDestination(p, archive.ExtractOptions{Base: "x", Guarded: guarded}); err != nil {
		return "", err
	}
	return p, nil
}

// ensureSandbox returns the sandbox to copy with. A running one is used as it is, even when
// its configuration changed since: recreating it would lose its tmpfs contents, which may be
// what the user is copying out. Otherwise it is started or resumed as sbx exec does; the
// project's sandbox (:PATH) is created too, but a sandbox the user named (NAME:PATH) must
// exist: a typo must not leave a new sandbox behind. The sandbox is leased (see maxRunning)
// until release is called.
func ensureSandbox(ctx context.Context, opts *CpOptions, m *sandbox.Manager, r *config.Resolved) (sb *sandbox.Sandbox, release func(), err error) {
	in, err := m.Resolver.SpecInput(r)
	if err != nil {
		return nil, nil, err
	}
	res, err := m.Ensure(ctx, in, sandbox.EnsureOptions{RecreateIfIdle: true, KeepRunning: true, MustExist: !r.IsDefaultName})
	if sandbox.IsNotFound(err) {
		return nil, nil, notFound(err, r.Name)
	}
	if err != nil {
		return nil, nil, err
	}
	cmdutil.WarnDrift(opts.IO, r.Name, res.Drift)
	return res.Sandbox, res.Lease.Release, nil
}

// notFound is a copy naming a sandbox that does not exist (exit 1, as sbx rm of one).
func notFound(err error, name string) error {
	return errs.New(err, errs.CodeError, fmt.Sprintf("create it first with \"sbx create -n %s\", or copy with the project's sandbox (:PATH); \"sbx ls\" lists sandboxes", name))
}

func report(opts *CpOptions, name string, into bool, box archive.Location, hostPath string, res *transfer.Result) error {
	if hostPath != "" {
		hostPath = filepath.Clean(hostPath)
	}
	s := Summary{Direction: "in", Sandbox: name, Src: hostPath, Dst: box.Path,
		Files: res.Stats.Files, Dirs: res.Stats.Dirs, Symlinks: res.Stats.Symlinks, Bytes: res.Stats.Bytes,
		DurationMS: res.Duration.Milliseconds()}
	if !into {
		s.Direction, s.Src, s.Dst = "out", box.Path, hostPath
	}
	for _, p := range []*string{&s.Src, &s.Dst} {
		if *p == "" {
			*p = "-"
		}
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, s)
	}
	where := "to"
	if !into {
		where = "from"
	}
	opts.IO.Progressf("copied %s %s %s:%s in %s\n", counts(res.Stats), where, name, box.Path, res.Duration.Round(10*time.Millisecond))
	return nil
}

func counts(s archive.Stats) string {
	plural := func(n int, what string) string {
		if n == 1 {
			return "1 " + what
		}
		return fmt.Sprintf("%d %ss", n, what)
	}
	parts := []string{plural(s.Files, "file")}
	if s.Dirs > 0 {
		parts = append(parts, plural(s.Dirs, "dir"))
	}
	if s.Symlinks > 0 {
		parts = append(parts, plural(s.Symlinks, "symlink"))
	}
	return fmt.Sprintf("%s (%s)", strings.Join(parts, ", "), humanBytes(s.Bytes))
}

// explainCopyError adds to a refused write what the sandbox's configuration says about the
// place, with the setting's source, and where the copy can go instead.
func explainCopyError(err error, r *config.Resolved, sb *sandbox.Sandbox) error {
	var ce *transfer.Error
	if !errors.As(err, &ce) || ce.Kind != transfer.ReadOnly {
		return err
	}
	at := fmt.Sprintf("%s:%s", ce.Sandbox, ce.Path)
	elsewhere := "copy into a writable place instead: " + strings.Join(writablePlaces(r, sb), ", ")
	mode := sb.Labels[sandbox.LabelWorkspace]
	switch {
	case ce.Mount == sandbox.WorkspacePath && mode == config.WorkspaceRO:
		from := fmt.Sprintf("workspace: ro, from %s", r.Source("workspace"))
		if r.Config.Workspace != mode {
			from = fmt.Sprintf("the sandbox was created with workspace: ro; the configuration now says %s, from %s", r.Config.Workspace, r.Source("workspace"))
		}
		create := "sbx create --replace"
		if !r.IsDefaultName {
			create = fmt.Sprintf("sbx create -n %s --replace", r.Name)
		}
		return errs.New(fmt.Errorf("cannot copy into %s: /workspace is the project directory mounted read-only (%s)", at, from), errs.CodeError,
			fmt.Sprintf("copy into /tmp instead (a tmpfs, emptied when the sandbox stops); or put the files in the project on the host, "+
				"which the sandbox sees at /workspace; or set workspace: rw (or none, a private volume) and run %s", create))
	case ce.Mount == "/" && r.Config.ReadOnlyRoot:
		return errs.New(fmt.Errorf("cannot copy into %s: the sandbox's root file system is read-only (readOnlyRoot: true, from %s)", at, r.Source("readOnlyRoot")),
			errs.CodeError, elsewhere)
	}
	for i, b := range r.Config.Binds {
		if b.Target == ce.Mount && b.ReadOnly {
			key := fmt.Sprintf("binds[%d]", i)
			return errs.New(fmt.Errorf("cannot copy into %s: %s is a read-only bind of %s (%s, from %s)", at, b.Target, b.Source, key, r.Source(key)),
				errs.CodeError, elsewhere)
		}
	}
	return errs.New(err, errs.CodeError, elsewhere)
}

// writablePlaces lists where the sandbox user can usually write: the tmpfs mounts, the
// workspace unless it is read-only, and writable binds.
func writablePlaces(r *config.Resolved, sb *sandbox.Sandbox) []string {
	var out []string
	for _, t := range r.Config.Tmpfs {
		out = append(out, t.Path)
	}
	if sb.Labels[sandbox.LabelWorkspace] != config.WorkspaceRO {
		out = append(out, sandbox.WorkspacePath)
	}
	for _, b := range r.Config.Binds {
		if !b.ReadOnly {
			out = append(out, b.Target)
		}
	}
	if len(out) == 0 {
		out = append(out, "/tmp")
	}
	return out
}
