//go:build linux

package transfer_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sbx-sandbox/sbx/pkg/archive"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
	"github.com/sbx-sandbox/sbx/pkg/transfer"
)

// hostEngine is a fake engine whose execs run on this machine, in the test's directories:
// the copy scripts need only bash, GNU tar, coreutils, findutils and util-linux, so their
// placement, staging and cleanup rules are tested here without a daemon. The exec's stdin
// is one end of a socket pair, as an engine's hijacked connection is, so CloseWrite ends it.
type hostEngine struct {
	t     *testing.T
	mu    sync.Mutex
	n     int
	cmds  map[string][]string
	procs map[string]*hostProc
}

type hostProc struct {
	done chan struct{}
	code int
}

func newHostManager(t *testing.T) *sandbox.Manager {
	t.Helper()
	for _, tool := range []string{"bash", "tar", "setsid", "flock", "find", "xargs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("copy scripts need %s on this machine: %v", tool, err)
		}
	}
	if runtime.GOOS != "linux" {
		t.Skip("the copy scripts use GNU tools")
	}
	h := &hostEngine{t: t, cmds: map[string][]string{}, procs: map[string]*hostProc{}}
	fake := &enginetest.FakeEngine{T: t,
		ContainerExecCreateFn: func(_ context.Context, _ string, o container.ExecOptions) (container.ExecCreateResponse, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.n++
			id := fmt.Sprintf("exec%d", h.n)
			h.cmds[id] = o.Cmd
			return container.ExecCreateResponse{ID: id}, nil
		},
		ContainerExecAttachFn: func(_ context.Context, id string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
			return h.attach(id)
		},
		ContainerExecInspectFn: func(_ context.Context, id string) (container.ExecInspect, error) {
			h.mu.Lock()
			p := h.procs[id]
			h.mu.Unlock()
			select {
			case <-p.done:
				return container.ExecInspect{ExecID: id, ExitCode: p.code}, nil
			default:
				return container.ExecInspect{ExecID: id, Running: true}, nil
			}
		},
	}
	return &sandbox.Manager{Engine: fake, Now: time.Now}
}

func (h *hostEngine) attach(id string) (types.HijackedResponse, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return types.HijackedResponse{}, err
	}
	clientFile, server := os.NewFile(uintptr(fds[0]), "client"), os.NewFile(uintptr(fds[1]), "server")
	client, err := net.FileConn(clientFile)
	clientFile.Close()
	if err != nil {
		return types.HijackedResponse{}, err
	}
	h.mu.Lock()
	args := h.cmds[id]
	p := &hostProc{done: make(chan struct{})}
	h.procs[id] = p
	h.mu.Unlock()

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = server
	cmd.Stdout = stdcopy.NewStdWriter(server, stdcopy.Stdout)
	cmd.Stderr = stdcopy.NewStdWriter(server, stdcopy.Stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return types.HijackedResponse{}, err
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() >= 0:
			p.code = ee.ExitCode()
		case errors.As(err, &ee):
			p.code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		case err != nil:
			p.code = 126
		}
		// The watchdog may still hold the socket as its stdin: shut the stream down for all.
		if rc, err := server.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_WR) })
		}
		server.Close()
		close(p.done)
	}()
	return types.NewHijackedResponse(client, ""), nil
}

var hostSandbox = &sandbox.Sandbox{Name: "box", ID: "c1", Status: "running"}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tree lists a directory as "name=content" and "name/" lines, sorted.
func tree(t *testing.T, root string) string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.IsDir():
			out = append(out, rel+"/")
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, rel+"->"+target)
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, rel+"="+string(data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

func TestCopyInPlacement(t *testing.T) {
	m := newHostManager(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"f.txt": "file", "d/a": "A", "d/sub/b": "B"})
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		setup    map[string]string // files in the sandbox before the copy
		mkdirs   []string
		opts     transfer.InOptions
		want     string
		wantKind string
	}{
		{name: "file to a new name", opts: transfer.InOptions{Src: "f.txt", Dst: "new.txt"}, want: "new.txt=file"},
		{name: "file into a directory", mkdirs: []string{"in"}, opts: transfer.InOptions{Src: "f.txt", Dst: "in"}, want: "in/ in/f.txt=file"},
		{name: "file replaces a file", setup: map[string]string{"x": "old"}, opts: transfer.InOptions{Src: "f.txt", Dst: "x"}, want: "x=file"},
		{name: "directory to a new name", opts: transfer.InOptions{Src: "d", Dst: "e"}, want: "e/ e/a=A e/sub/ e/sub/b=B"},
		{name: "directory merges into its namesake", setup: map[string]string{"in/d/a": "old", "in/d/keep": "K"},
			opts: transfer.InOptions{Src: "d", Dst: "in/"}, want: "in/ in/d/ in/d/a=A in/d/keep=K in/d/sub/ in/d/sub/b=B"},
		{name: "contents merge", setup: map[string]string{"t/keep": "K", "t/sub/c": "C"},
			opts: transfer.InOptions{Src: "d", Contents: true, Dst: "t"}, want: "t/ t/a=A t/keep=K t/sub/ t/sub/b=B t/sub/c=C"},
		{name: "contents to a new directory", opts: transfer.InOptions{Src: "d", Contents: true, Dst: "n"}, want: "n/ n/a=A n/sub/ n/sub/b=B"},
		{name: "directory over a file", setup: map[string]string{"x": "old"}, opts: transfer.InOptions{Src: "d", Dst: "x"}, want: "x=old", wantKind: transfer.NotDir},
		{name: "directory over a file in the destination directory", setup: map[string]string{"in/d": "file"}, opts: transfer.InOptions{Src: "d", Dst: "in"},
			want: "in/ in/d=file", wantKind: transfer.NotDir},
		{name: "file over a directory", setup: map[string]string{"in/f.txt/z": "z"}, opts: transfer.InOptions{Src: "f.txt", Dst: "in"},
			want: "in/ in/f.txt/ in/f.txt/z=z", wantKind: transfer.IsDir},
		{name: "merge conflict moves nothing", setup: map[string]string{"t/a/deep": "x", "t/keep": "K"},
			opts: transfer.InOptions{Src: "d", Contents: true, Dst: "t"}, want: "t/ t/a/ t/a/deep=x t/keep=K", wantKind: transfer.IsDir},
		{name: "missing parent", opts: transfer.InOptions{Src: "f.txt", Dst: "no/such"}, wantKind: transfer.NoDir},
		{name: "file to a directory path that does not exist", opts: transfer.InOptions{Src: "f.txt", Dst: "nd", DstIsDir: true}, wantKind: transfer.NoDir},
	} {
		t.Run(tt.name, func(t *testing.T) {
			box := t.TempDir()
			writeFiles(t, box, tt.setup)
			for _, d := range tt.mkdirs {
				if err := os.Mkdir(filepath.Join(box, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			opts := tt.opts
			opts.Src, opts.Dst = filepath.Join(src, opts.Src), filepath.Join(box, opts.Dst)
			_, err := transfer.New(m).In(ctx, hostSandbox, opts)
			var ce *transfer.Error
			switch {
			case tt.wantKind == "" && err != nil:
				t.Fatalf("CopyIn: %v", err)
			case tt.wantKind != "" && (!errors.As(err, &ce) || ce.Kind != tt.wantKind):
				t.Fatalf("err = %v, want a CopyError of kind %s", err, tt.wantKind)
			}
			if got := tree(t, box); got != tt.want {
				t.Errorf("sandbox holds\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

func TestCopyInCleansLeftoversButNotLiveStaging(t *testing.T) {
	m := newHostManager(t)
	src, box := t.TempDir(), t.TempDir()
	writeFiles(t, src, map[string]string{"f": "x"})
	writeFiles(t, box, map[string]string{".sbx-cp-dead/item": "half", ".sbx-cp-live/item": "busy"})
	live, err := os.Open(filepath.Join(box, ".sbx-cp-live"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := transfer.New(m).In(context.Background(), hostSandbox, transfer.InOptions{Src: filepath.Join(src, "f"), Dst: filepath.Join(box, "f")}); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, box); got != ".sbx-cp-live/ .sbx-cp-live/item=busy f=x" {
		t.Errorf("after the copy: %s", got)
	}
}

func TestCopyInStripsSetuidAndKeepsModes(t *testing.T) {
	m := newHostManager(t)
	box := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o555},
		{Name: "ro/suid", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 1},
		{Name: "sgid/", Typeflag: tar.TypeDir, Mode: 0o2775},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("x"))
		}
	}
	tw.Close()
	res, err := transfer.New(m).In(context.Background(), hostSandbox, transfer.InOptions{Stream: &buf, Dst: box})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Files != 1 || res.Stats.Dirs != 2 || res.Stats.Bytes != 1 {
		t.Errorf("stats %+v", res.Stats)
	}
	for name, want := range map[string]fs.FileMode{"ro": fs.ModeDir | 0o555, "ro/suid": 0o755, "sgid": fs.ModeDir | 0o775} {
		fi, err := os.Lstat(filepath.Join(box, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (fs.ModeDir | fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid); got != want {
			t.Errorf("%s: mode %v, want %v", name, got, want)
		}
	}
	if _, err := transfer.New(m).In(context.Background(), hostSandbox, transfer.InOptions{Stream: strings.NewReader(""), Dst: filepath.Join(box, "nope")}); !isKind(err, transfer.NoDir) {
		t.Errorf("stream into a missing directory: %v", err)
	}
}

func isKind(err error, kind string) bool {
	var ce *transfer.Error
	return errors.As(err, &ce) && ce.Kind == kind
}

// A source that fails half way (here a symlink out of the tree, met after a file) must not
// leave anything at the destination, nor a staging directory.
func TestCopyInSourceFailureWritesNothing(t *testing.T) {
	m := newHostManager(t)
	src, box := t.TempDir(), t.TempDir()
	writeFiles(t, src, map[string]string{"d/a": strings.Repeat("x", 3<<20)})
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "d", "z")); err != nil {
		t.Fatal(err)
	}
	_, err := transfer.New(m).In(context.Background(), hostSandbox, transfer.InOptions{Src: filepath.Join(src, "d"), Dst: filepath.Join(box, "d")})
	if !errors.Is(err, archive.ErrLinkOutside) {
		t.Fatalf("err = %v, want the source's own error", err)
	}
	if got := tree(t, box); got != "" {
		t.Errorf("sandbox holds %s", got)
	}
}

// slowReader hands out a little data, then blocks until the test is done.
type slowReader struct {
	data    []byte
	blocked chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *slowReader) Read(p []byte) (int, error) {
	if len(s.data) > 0 {
		n := copy(p, s.data)
		s.data = s.data[n:]
		return n, nil
	}
	s.once.Do(func() { close(s.blocked) })
	<-s.release
	return 0, io.ErrClosedPipe
}

func TestCopyInCancelLeavesNothing(t *testing.T) {
	m := newHostManager(t)
	box := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 10 << 20})
	_, _ = tw.Write(make([]byte, 1<<20))
	r := &slowReader{data: buf.Bytes(), blocked: make(chan struct{}), release: make(chan struct{})}
	defer close(r.release)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-r.blocked; time.Sleep(200 * time.Millisecond); cancel() }()
	start := time.Now()
	_, err := transfer.New(m).In(ctx, hostSandbox, transfer.InOptions{Stream: r, Dst: box})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("cancel took %s", took)
	}
	if got := tree(t, box); got != "" {
		t.Errorf("sandbox holds %s", got)
	}
}

func TestCopyOut(t *testing.T) {
	m := newHostManager(t)
	box := t.TempDir()
	writeFiles(t, box, map[string]string{"d/a": "A", "d/sub/b": "B", "f": "file", "links/ok": "o"})
	for link, target := range map[string]string{"links/passwd": "/etc/passwd", "links/root": "/", "tolink": "d", "filelink": "f"} {
		if err := os.Symlink(target, filepath.Join(box, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(box, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(box, "d", "a"), filepath.Join(box, "d", "hard")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		opts    transfer.OutOptions
		want    string
		wantErr func(error) bool
	}{
		{name: "file", opts: transfer.OutOptions{Src: "f", Dst: "out"}, want: "out=file"},
		{name: "directory, hardlinks as files", opts: transfer.OutOptions{Src: "d", Dst: "out"}, want: "out/ out/a=A out/hard=A out/sub/ out/sub/b=B"},
		{name: "contents into an existing directory", opts: transfer.OutOptions{Src: "d", Contents: true, Dst: "."}, want: "a=A hard=A sub/ sub/b=B"},
		{name: "symlinks to /etc/passwd and / are refused", opts: transfer.OutOptions{Src: "links", Dst: "out"},
			wantErr: func(err error) bool { return errors.Is(err, archive.ErrSymlink) }},
		{name: "a symlinked source needs -L", opts: transfer.OutOptions{Src: "tolink", Dst: "out"},
			wantErr: func(err error) bool { return isKind(err, transfer.Symlink) }},
		{name: "-L follows a directory link", opts: transfer.OutOptions{Src: "tolink", FollowLink: true, Dst: "out"}, want: "out/ out/a=A out/hard=A out/sub/ out/sub/b=B"},
		{name: "-L follows a file link", opts: transfer.OutOptions{Src: "filelink", FollowLink: true, Dst: "out"}, want: "out=file"},
		{name: "a FIFO is refused, not read", opts: transfer.OutOptions{Src: "fifo", Dst: "out"},
			wantErr: func(err error) bool { return errors.Is(err, archive.ErrFIFO) }},
		{name: "missing", opts: transfer.OutOptions{Src: "nope", Dst: "out"}, wantErr: func(err error) bool { return isKind(err, transfer.Missing) }},
		{name: "a file is not a directory", opts: transfer.OutOptions{Src: "f", SrcIsDir: true, Dst: "out"}, wantErr: func(err error) bool { return isKind(err, transfer.NotDir) }},
		{name: "caps apply", opts: transfer.OutOptions{Src: "d", Dst: "out", MaxEntries: 2},
			wantErr: func(err error) bool { var le *archive.LimitError; return errors.As(err, &le) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host := t.TempDir()
			opts := tt.opts
			opts.Src, opts.Dst = filepath.Join(box, opts.Src), filepath.Join(host, opts.Dst)
			done := make(chan struct{})
			var err error
			go func() { _, err = transfer.New(m).Out(ctx, hostSandbox, opts); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("CopyOut hangs")
			}
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("err = %v", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := tree(t, host); got != tt.want {
				t.Errorf("host holds\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

func TestCopyOutStreamAndTotals(t *testing.T) {
	m := newHostManager(t)
	box := t.TempDir()
	writeFiles(t, box, map[string]string{"d/a": "AA", "d/b": "BBB"})
	var raw bytes.Buffer
	var totalBytes int64
	var totalFiles int
	res, err := transfer.New(m).Out(context.Background(), hostSandbox, transfer.OutOptions{Src: filepath.Join(box, "d"), Stream: &raw,
		Totals: func(b int64, n int) { totalBytes, totalFiles = b, n }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Files != 2 || res.Stats.Dirs != 1 || res.Stats.Bytes != 5 || totalBytes != 5 || totalFiles != 2 {
		t.Errorf("stats %+v, totals %d bytes %d files", res.Stats, totalBytes, totalFiles)
	}
	tr := tar.NewReader(&raw)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, " ") != "d/ d/a d/b" && strings.Join(names, " ") != "d/ d/b d/a" {
		t.Errorf("raw stream holds %v", names)
	}
}

func TestCopyOutCleansHostLeftovers(t *testing.T) {
	m := newHostManager(t)
	box, host := t.TempDir(), t.TempDir()
	writeFiles(t, box, map[string]string{"f": "x"})
	writeFiles(t, host, map[string]string{".sbx-cp-killed/item": "half"})
	if _, err := transfer.New(m).Out(context.Background(), hostSandbox, transfer.OutOptions{Src: filepath.Join(box, "f"), Dst: filepath.Join(host, "f")}); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, host); got != "f=x" {
		t.Errorf("host holds %s", got)
	}
}

// CopyOut guards the directories the sandbox itself can write, besides those the caller
// names, and applies the caller's umask.
func TestCopyOutGuardsAndUmask(t *testing.T) {
	m := newHostManager(t)
	box, host, outside := t.TempDir(), t.TempDir(), t.TempDir()
	writeFiles(t, box, map[string]string{"f": "x"})
	if err := os.Chmod(filepath.Join(box, "f"), 0o666); err != nil {
		t.Fatal(err)
	}
	bound := filepath.Join(host, "bound") // a writable bind of the sandbox's
	if err := os.Mkdir(bound, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(bound, "out")); err != nil {
		t.Fatal(err)
	}
	sb := *hostSandbox
	sb.WritableHostPaths = []string{bound}
	ctx := context.Background()
	_, err := transfer.New(m).Out(ctx, &sb, transfer.OutOptions{Src: filepath.Join(box, "f"), Dst: filepath.Join(bound, "out") + "/"})
	var le *archive.LinkError
	if !errors.As(err, &le) {
		t.Errorf("through a link in the sandbox's bind: %v", err)
	}
	if got := tree(t, outside); got != "" {
		t.Errorf("the link's target holds %s", got)
	}
	dst := filepath.Join(host, "f")
	if _, err := transfer.New(m).Out(ctx, &sb, transfer.OutOptions{Src: filepath.Join(box, "f"), Dst: dst, Umask: 0o027}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode() != 0o640 {
		t.Errorf("mode %v (%v); want 0640 under umask 027", fi.Mode(), err)
	}
}
