package transfer

import (
	"archive/tar"
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/archive"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// Copier copies files between the host and running sandboxes. It needs only an Execer and
// a clock.
type Copier struct {
	Exec Execer
	Now  func() time.Time
}

// Execer runs a command in a sandbox: sandbox.Manager.Exec.
type Execer interface {
	Exec(ctx context.Context, sb *sandbox.Sandbox, opts sandbox.ExecOptions) (*sandbox.ExecResult, error)
}

// New is the Copier that runs its copies through m.
func New(m *sandbox.Manager) *Copier { return &Copier{Exec: m, Now: m.Now} }

// SendTar unpacks the tar stream r into the existing directory dir of sb: the core's
// sandbox.Carrier, for a carried workspace.
func (c *Copier) SendTar(ctx context.Context, sb *sandbox.Sandbox, dir string, r io.Reader) error {
	_, err := c.In(ctx, sb, InOptions{Dst: dir, DstIsDir: true, Stream: r})
	return err
}

// FetchDir copies what sb's directory dir holds into the host directory dst: the core's
// sandbox.Carrier, for a carried workspace.
func (c *Copier) FetchDir(ctx context.Context, sb *sandbox.Sandbox, dir, dst string) error {
	_, err := c.Out(ctx, sb, OutOptions{Src: dir, SrcIsDir: true, Contents: true, Dst: dst})
	return err
}

// copyInScript puts an item copied into a sandbox in place: see scripts/copy_in.sh.
//
// Through the engine's exec the stream comes in frames ("LEN\n" then LEN bytes) ended by
// "0\n", which sbx sends only after the whole tar was written: a stream that stops early (sbx
// killed, a host file that changed) never lacks just its end-of-archive marker unnoticed, and
// nothing is renamed. Through the agent (raw=1) the tar comes as it is, and the agent kills
// the script instead of ending its input when the stream stops early (StrictStdin), which
// spares decoding frames in bash.
//
//go:embed scripts/copy_in.sh
var copyInScript string

// copyOutScript writes a sandbox path as a tar stream: see scripts/copy_out.sh.
//
//go:embed scripts/copy_out.sh
var copyOutScript string

// Kinds of Error.
const (
	ReadOnly   = "rofs"       // the destination's file system is read-only
	Denied     = "denied"     // the sandbox user may not write there
	NoSpace    = "nospace"    // the destination's file system is full
	NoDir      = "nodir"      // a directory the copy needs does not exist
	NotDir     = "notdir"     // a path that must be a directory is not one
	IsDir      = "isdir"      // a file would replace a directory
	Missing    = "missing"    // the source does not exist in the sandbox
	Symlink    = "symlink"    // the source is a symlink and -L was not given
	Owner      = "owner"      // -a asked for an owner the sandbox user cannot give
	Incomplete = "incomplete" // the stream into the sandbox ended early
	Failed     = "failed"     // anything else the sandbox side reported
)

// Error is a copy the sandbox side refused or could not finish. Nothing was put in
// place: a copy into a sandbox renames its staged item only after a complete stream.
type Error struct {
	Kind    string // one of the Copy* kinds
	Sandbox string
	Path    string // the sandbox path concerned
	Mount   string // ReadOnly: the mount point holding Path inside the sandbox
	Target  string // Symlink: where the link points
	Detail  string // what tar or the script said, control characters removed
}

func (e *Error) Error() string {
	at := fmt.Sprintf("%s:%s", e.Sandbox, e.Path)
	switch e.Kind {
	case ReadOnly:
		return fmt.Sprintf("cannot write to %s: the file system mounted at %s is read-only", at, e.Mount)
	case Denied:
		return fmt.Sprintf("cannot write to %s: the sandbox user has no write permission there", at)
	case NoSpace:
		return fmt.Sprintf("cannot write to %s: no space left on its file system in the sandbox", at)
	case NoDir:
		return fmt.Sprintf("directory %s does not exist", at)
	case NotDir:
		return fmt.Sprintf("%s is not a directory", at)
	case IsDir:
		return fmt.Sprintf("cannot overwrite directory %s with a file", at)
	case Missing:
		return fmt.Sprintf("%s does not exist", at)
	case Symlink:
		return fmt.Sprintf("%s is a symlink (to %q)", at, e.Target)
	case Owner:
		return fmt.Sprintf("cannot keep file owners in %s: %s", at, e.Detail)
	case Incomplete:
		return fmt.Sprintf("the copy into %s was cut short; nothing was written", at)
	}
	if e.Detail != "" {
		return fmt.Sprintf("copying %s failed: %s", at, e.Detail)
	}
	return fmt.Sprintf("copying %s failed", at)
}

// Hint says what to do instead.
func (e *Error) Hint() string {
	switch e.Kind {
	case ReadOnly:
		return "copy into a writable place such as /tmp"
	case Denied:
		return "copy into a directory the sandbox user owns, such as /tmp"
	case NoSpace:
		return "free space there, or copy somewhere larger; tmpfs sizes come from the tmpfs key (sbx explain shows them)"
	case Symlink:
		return "pass -L/--follow-link to copy what it points to"
	case Owner:
		return "drop -a so the files belong to the sandbox user, or give them to the sandbox user on the host first"
	}
	return ""
}

// InOptions describe a copy from the host into a sandbox.
type InOptions struct {
	// Dst is the absolute sandbox path; DstIsDir says it was written with a trailing slash.
	Dst      string
	DstIsDir bool
	// Src is the host file or directory; Contents copies what is inside the directory Src
	// (SRC/.). FollowLink follows Src itself when it is a symlink.
	Src        string
	Contents   bool
	FollowLink bool
	// KeepOwner keeps the host uid and gid (sbx cp -a). The sandbox has no capabilities,
	// so its user can only give files to itself (and to groups it is in): any other owner
	// fails the copy with a Owner error, and nothing is written.
	KeepOwner bool
	// Stream, when set instead of Src, is a tar stream (sbx cp - NAME:DIR) whose entries
	// are extracted into the existing directory Dst by the sandbox's tar.
	Stream io.Reader
	// Progress, if set, gets running totals of what has been sent.
	Progress func(archive.Stats)
}

// OutOptions describe a copy from a sandbox to the host.
type OutOptions struct {
	// Src is the absolute sandbox path; SrcIsDir says it must be a directory (a trailing
	// slash); Contents copies what is inside it (SRC/.). FollowLink follows Src itself when
	// it is a symlink.
	Src        string
	SrcIsDir   bool
	Contents   bool
	FollowLink bool
	// Dst is the absolute host path, given to archive.Extract with the caps below (0: the
	// default).
	Dst        string
	MaxBytes   int64
	MaxEntries int
	MaxDepth   int
	// Guarded are host directories a sandbox may write to, where no link on the way to Dst
	// is followed (archive.ExtractOptions.Guarded); the directories sb itself can write are
	// added.
	Guarded []string
	// Umask is the user's umask, applied to what the copy creates on the host.
	Umask fs.FileMode
	// Stream, when set instead of Dst, receives the sandbox's raw tar stream (sbx cp
	// NAME:PATH -); it is the caller's to treat as untrusted.
	Stream io.Writer
	// Progress, if set, gets running totals of what has been received.
	Progress func(archive.Stats)
	// Totals, if set, asks the sandbox first for the size of the tree (its own claim, for a
	// progress bar only) and gets it before any data.
	Totals func(bytes int64, files int)
}

// Result is what a copy moved.
type Result struct {
	Stats    archive.Stats
	Duration time.Duration
}

// errStreamEnded ends the tar stream that sbx reads when the sandbox side failed, so the
// extractor never commits what it read.
var errStreamEnded = errors.New("the sandbox side of the copy failed")

// In copies a host file or directory, or a tar stream, into the running sandbox sb.
// The item appears at its destination complete or not at all; staging leftovers of killed
// copies in that directory are removed first. Cancelling ctx stops the copy and kills the
// sandbox side.
func (c *Copier) In(ctx context.Context, sb *sandbox.Sandbox, opts InOptions) (*Result, error) {
	res, err := c.in(ctx, sb, opts, true)
	if errors.Is(err, sandbox.ErrNoAgent) {
		return c.in(ctx, sb, opts, false)
	}
	return res, err
}

// in sends the tar raw to the sandbox's agent, or framed through any transport; raw
// fails with sandbox.ErrNoAgent, before anything is sent, when the agent does not answer.
func (c *Copier) in(ctx context.Context, sb *sandbox.Sandbox, opts InOptions, raw bool) (*Result, error) {
	start := c.Now()
	kind, base, mode, err := copyInSource(opts)
	if err != nil {
		return nil, err
	}
	cmd := sb.Script(copyInScript, "sbx-cp", opts.Dst, copyFlag(opts.DstIsDir), base, kind,
		fmt.Sprintf("%o", mode), copyFlag(opts.KeepOwner), sandbox.RandomID(), archive.StagingPrefix, copyFlag(raw))

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	proto := newProtoWriter(nil)
	stderr := newProtoWriter(nil)
	type outcome struct {
		res *sandbox.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Exec.Exec(ctx, sb, sandbox.ExecOptions{Cmd: cmd, Interactive: true, Stdin: pr, Stdout: proto, Stderr: stderr, StrictStdin: raw})
		// Unblock a sender whose data nobody reads any more.
		pr.CloseWithError(errStreamEnded)
		done <- outcome{res, err}
	}()

	type sendResult struct {
		stats archive.Stats
		err   error
	}
	var sent sendResult
	var out outcome
	select {
	case <-proto.ready:
		sending := make(chan sendResult, 1)
		go func() {
			stats, err := sendTar(ctx, pw, opts, raw)
			pw.CloseWithError(err) // nil: a plain close
			sending <- sendResult{stats, err}
		}()
		select {
		case sent = <-sending:
			out = <-done
		case out = <-done:
			// The sandbox side ended first; a sender still blocked reading its source (a
			// stdin that stays open) is left behind rather than waited for.
			select {
			case sent = <-sending:
			case <-time.After(time.Second):
				sent.err = errStreamEnded
			}
		}
	case out = <-done:
		pw.Close()
	}
	stats, sendErr := sent.stats, sent.err
	if err := parent.Err(); err != nil {
		return nil, err
	}
	if perr := proto.failure(sb.Name, opts.Dst, stderr.text()); perr != nil {
		// The source's own error says more than the sandbox seeing the stream stop.
		if sendErr != nil && !errors.Is(sendErr, errStreamEnded) && perr.Kind == Incomplete {
			return nil, sendErr
		}
		return nil, perr
	}
	if sendErr != nil && !errors.Is(sendErr, errStreamEnded) {
		return nil, sendErr
	}
	if out.err != nil {
		return nil, out.err
	}
	if out.res.ExitCode != 0 || !proto.finished() {
		return nil, &Error{Kind: Failed, Sandbox: sb.Name, Path: opts.Dst,
			Detail: fmt.Sprintf("exit status %d%s", out.res.ExitCode, copyDetail(stderr.text()))}
	}
	return &Result{Stats: stats, Duration: c.Now().Sub(start)}, nil
}

func copyFlag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// copyInSource says what the source is: kind f (file), d (directory), c (a directory's
// contents) or s (a tar stream); the name it lands under in an existing directory; and, for
// contents, the directory's mode.
func copyInSource(opts InOptions) (kind, base string, mode fs.FileMode, err error) {
	if !path.IsAbs(opts.Dst) {
		return "", "", 0, fmt.Errorf("sandbox path %q is not absolute", opts.Dst)
	}
	if opts.Stream != nil {
		return "s", "-", 0o755, nil
	}
	fi, err := os.Lstat(opts.Src)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 && opts.FollowLink {
		fi, err = os.Stat(opts.Src)
	}
	if err != nil {
		return "", "", 0, err
	}
	base = filepath.Base(opts.Src)
	if !opts.Contents && (base == "." || base == ".." || base == string(filepath.Separator)) {
		return "", "", 0, &archive.SourceError{Path: opts.Src, Err: errors.New("has no name to copy it under; copy its contents (DIR/.) instead")}
	}
	switch {
	case opts.Contents && !fi.IsDir():
		return "", "", 0, &archive.SourceError{Path: opts.Src, Err: errors.New("not a directory, so it has no contents to copy")}
	case opts.Contents:
		return "c", base, fi.Mode().Perm(), nil
	case fi.IsDir():
		return "d", base, 0, nil
	}
	// WriteTar refuses symlinks and special files with the reason.
	return "f", base, 0, nil
}

// sendTar writes the framed tar stream of opts's source to w, ending it with the frame
// that tells the sandbox the stream is complete only when all of it was written.
func sendTar(ctx context.Context, w io.Writer, opts InOptions, raw bool) (archive.Stats, error) {
	var fw io.Writer = frameWriter{w}
	if raw {
		fw = w
	}
	// Frames of 8 MiB: each costs the sandbox a fork of head.
	bw := bufio.NewWriterSize(fw, 8<<20)
	var stats archive.Stats
	var err error
	if opts.Stream != nil {
		stats, err = forwardTar(ctx, bw, opts.Stream, opts.Progress)
	} else {
		stats, err = archive.WriteTar(ctx, bw, opts.Src, archive.WriteOptions{
			Name: "item", Contents: opts.Contents, FollowLink: opts.FollowLink,
			KeepOwner: opts.KeepOwner, Progress: opts.Progress,
		})
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && !raw {
		_, err = io.WriteString(w, "0\n")
	}
	return stats, err
}

// frameWriter writes each chunk as "LEN\n" and the bytes, for copyInScript's reader.
type frameWriter struct{ w io.Writer }

func (f frameWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if _, err := io.WriteString(f.w, strconv.Itoa(len(p))+"\n"); err != nil {
		return 0, err
	}
	return f.w.Write(p)
}

// forwardTar copies the tar stream r to w unchanged, counting its entries on the way. What
// does not parse as tar is forwarded all the same; the sandbox's tar judges it.
func forwardTar(ctx context.Context, w io.Writer, r io.Reader, progress func(archive.Stats)) (archive.Stats, error) {
	var stats archive.Stats
	cw := &ctxWriter{ctx: ctx, w: w}
	tee := io.TeeReader(r, cw)
	tr := tar.NewReader(tee)
	for {
		hdr, err := tr.Next()
		if err != nil {
			if cw.err != nil {
				return stats, cw.err
			}
			break
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			stats.Dirs++
		case tar.TypeSymlink:
			stats.Symlinks++
		case tar.TypeReg:
			stats.Files++
		}
		if _, err := io.Copy(countWriter{&stats, progress}, tr); err != nil {
			if cw.err != nil {
				return stats, cw.err
			}
			break
		}
		if progress != nil {
			progress(stats)
		}
	}
	if _, err := io.Copy(cw, r); err != nil {
		return stats, err
	}
	return stats, nil
}

// countWriter adds what is written to the byte count.
type countWriter struct {
	stats    *archive.Stats
	progress func(archive.Stats)
}

func (c countWriter) Write(p []byte) (int, error) {
	c.stats.Bytes += int64(len(p))
	if c.progress != nil {
		c.progress(*c.stats)
	}
	return len(p), nil
}

// ctxWriter stops writing once ctx is done and remembers its first error.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
	err error
}

func (c *ctxWriter) Write(p []byte) (int, error) {
	if c.err == nil {
		c.err = c.ctx.Err()
	}
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

// Out copies a sandbox path to the host (or, with opts.Stream, passes the sandbox's tar
// stream through). The stream is untrusted: archive.Extract validates every entry and
// renames the result into place only when the whole stream was read and the sandbox's tar
// succeeded; on any failure the destination is left as it was. Leftovers of killed copies in
// the host directory that receives the item are removed first.
func (c *Copier) Out(ctx context.Context, sb *sandbox.Sandbox, opts OutOptions) (*Result, error) {
	start := c.Now()
	if !path.IsAbs(opts.Src) || opts.Src == "/" {
		return nil, fmt.Errorf("sandbox path %q: name a file or directory below /", opts.Src)
	}
	xopts := archive.ExtractOptions{Base: path.Base(opts.Src), Contents: opts.Contents,
		MaxBytes: opts.MaxBytes, MaxEntries: opts.MaxEntries, MaxDepth: opts.MaxDepth, Progress: opts.Progress,
		Guarded: append(slices.Clip(opts.Guarded), sb.WritableHostPaths...), Umask: opts.Umask}
	if opts.Stream == nil {
		// A destination Extract would refuse is refused before anything runs in the sandbox.
		if err := archive.CheckDestination(opts.Dst, xopts); err != nil {
			return nil, err
		}
	}
	cmd := sb.Script(copyOutScript, "sbx-cp", opts.Src, copyFlag(opts.SrcIsDir || opts.Contents),
		copyFlag(opts.FollowLink), copyFlag(opts.Stream != nil), copyFlag(opts.Totals != nil))

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	stderr := newProtoWriter(opts.Totals)
	type outcome struct {
		res *sandbox.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Exec.Exec(ctx, sb, sandbox.ExecOptions{Cmd: cmd, Stdout: pw, Stderr: stderr})
		// The reader sees the end of the stream only once the sandbox's tar has succeeded.
		if err == nil && res.ExitCode == 0 {
			pw.Close()
		} else {
			pw.CloseWithError(errStreamEnded)
		}
		done <- outcome{res, err}
	}()

	var stats archive.Stats
	var err error
	if opts.Stream != nil {
		stats, err = forwardTar(ctx, opts.Stream, pr, opts.Progress)
	} else {
		stats, err = archive.Extract(ctx, pr, opts.Dst, xopts)
	}
	if err != nil {
		cancel()
		pr.CloseWithError(err)
	}
	out := <-done
	if err := parent.Err(); err != nil {
		return nil, err
	}
	if perr := stderr.failure(sb.Name, opts.Src, ""); perr != nil {
		return nil, perr
	}
	if err != nil && !errors.Is(err, errStreamEnded) {
		return nil, err
	}
	if out.err != nil {
		return nil, out.err
	}
	if out.res.ExitCode != 0 {
		return nil, &Error{Kind: Failed, Sandbox: sb.Name, Path: opts.Src,
			Detail: fmt.Sprintf("tar in the sandbox: exit status %d%s", out.res.ExitCode, copyDetail(stderr.text()))}
	}
	return &Result{Stats: stats, Duration: c.Now().Sub(start)}, nil
}

// protoWriter collects an exec's output stream, picking out copyInScript's and
// copyOutScript's "sbx-cp ..." lines and keeping a bounded amount of the rest (tar's
// messages) for errors. The sandbox writes it, so nothing here trusts its size or bytes.
type protoWriter struct {
	mu     sync.Mutex
	line   []byte
	other  []byte
	errs   []string // the error line's fields
	done   bool
	ready  chan struct{}
	once   sync.Once
	totals func(int64, int)
}

const (
	maxProtoLine = 4096
	maxOther     = 8192
)

func newProtoWriter(totals func(int64, int)) *protoWriter {
	return &protoWriter{ready: make(chan struct{}), totals: totals}
}

func (p *protoWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range b {
		if c != '\n' {
			if len(p.line) < maxProtoLine {
				p.line = append(p.line, c)
			}
			continue
		}
		p.handle(string(p.line))
		p.line = p.line[:0]
	}
	return len(b), nil
}

func (p *protoWriter) handle(line string) {
	rest, ok := strings.CutPrefix(line, "sbx-cp ")
	if !ok {
		if len(p.other) < maxOther {
			p.other = append(p.other, line[:min(len(line), maxOther-len(p.other))]...)
			p.other = append(p.other, '\n')
		}
		return
	}
	verb, arg, _ := strings.Cut(rest, " ")
	switch verb {
	case "ready":
		p.once.Do(func() { close(p.ready) })
	case "done":
		p.done = true
	case "error":
		if p.errs == nil {
			kind, detail, _ := strings.Cut(arg, " ")
			p.errs = []string{kind, detail}
		}
	case "total":
		b, n, _ := strings.Cut(arg, " ")
		bytes, err1 := strconv.ParseInt(b, 10, 64)
		files, err2 := strconv.Atoi(n)
		if err1 == nil && err2 == nil && p.totals != nil {
			p.totals(bytes, files)
		}
	}
}

// finished reports whether the script said the item is in place.
func (p *protoWriter) finished() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *protoWriter) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.other)
}

// failure turns the script's error line, if any, into a *Error. what is the sandbox path
// of the copy; messages are tar's (or other) output that came with it.
func (p *protoWriter) failure(sandbox, what, messages string) *Error {
	p.mu.Lock()
	errLine := p.errs
	if messages == "" {
		messages = string(p.other)
	}
	p.mu.Unlock()
	if errLine == nil {
		return nil
	}
	e := &Error{Kind: errLine[0], Sandbox: sandbox, Path: what}
	arg := termtext.Clean(errLine[1])
	switch e.Kind {
	case ReadOnly:
		e.Mount = arg
	case Symlink:
		e.Target = arg
	case Denied, NoSpace, NoDir, NotDir, IsDir, Missing:
		if arg != "" {
			e.Path = arg
		}
	case Incomplete:
	case "tar":
		e.Kind, e.Detail = Failed, "tar in the sandbox: exit status "+arg+copyDetail(messages)
		for _, l := range strings.Split(messages, "\n") {
			if _, owner, ok := strings.Cut(l, "Cannot change ownership to "); ok {
				e.Kind, e.Detail = Owner, "the sandbox user cannot give files to "+termtext.Clean(strings.TrimSuffix(owner, ": Operation not permitted"))+
					" (it has no capabilities; -a keeps an owner only when it is the sandbox user)"
				break
			}
			// GNU tar reports a full file system as a short write, without the errno.
			if strings.Contains(l, "No space left on device") || strings.Contains(l, ": Wrote only ") {
				e.Kind, e.Detail = NoSpace, ""
				break
			}
		}
	default:
		e.Kind, e.Detail = Failed, strings.TrimSpace(errLine[0]+" "+arg)+copyDetail(messages)
	}
	return e
}

// copyDetail formats the sandbox's messages to follow an error, one line, bounded.
func copyDetail(messages string) string {
	s := termtext.Clean(strings.Join(strings.Fields(messages), " "))
	if s == "" {
		return ""
	}
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return ": " + s
}
