package transfer_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/internal/testenv"
	"github.com/sbx-sandbox/sbx/pkg/archive"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/sandbox/sandboxtest"
	"github.com/sbx-sandbox/sbx/pkg/transfer"
)

// These run against the real engine, through sandboxtest: a uniquely named, labelled sandbox
// per test, removed in t.Cleanup.

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// treeDigest hashes every regular file under root with its relative path, and lists the
// directories, so two trees compare equal only if they hold the same names and bytes.
func treeDigest(t *testing.T, root string) (string, int) {
	t.Helper()
	var lines []string
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.IsDir():
			lines = append(lines, rel+"/")
		case d.Type().IsRegular():
			sum, err := fileSHA(p)
			if err != nil {
				return err
			}
			lines = append(lines, rel+" "+sum)
			files++
		default:
			return fmt.Errorf("%s: unexpected type %v", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:]), files
}

func fileSHA(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyIn(e *sandboxtest.Env, opts transfer.InOptions) (*transfer.Result, error) {
	e.T.Helper()
	return transfer.New(e.M).In(context.Background(), e.Ensure().Sandbox, opts)
}

func copyOut(e *sandboxtest.Env, opts transfer.OutOptions) (*transfer.Result, error) {
	e.T.Helper()
	return transfer.New(e.M).Out(context.Background(), e.Ensure().Sandbox, opts)
}

func TestCopyRoundTrip100MiB(t *testing.T) {
	sandboxtest.ViaBoth(t, func(t *testing.T, iso string, agents bool) {
		e := sandboxtest.NewVia(t, agents, sandboxtest.Isolated(iso, nil))
		src := filepath.Join(t.TempDir(), "big.bin")
		f, err := os.Create(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(f, rand.Reader, 100<<20); err != nil {
			t.Fatal(err)
		}
		f.Close()
		want, _ := fileSHA(src)

		in, err := copyIn(e, transfer.InOptions{Src: src, Dst: "/tmp/big.bin"})
		if err != nil {
			t.Fatalf("copy in: %v", err)
		}
		if o := e.Sh("sha256sum /tmp/big.bin"); !strings.HasPrefix(o.Stdout, want) {
			t.Fatalf("in the sandbox: %q %q, want %s", o.Stdout, o.Stderr, want)
		}
		dst := filepath.Join(t.TempDir(), "back.bin")
		out, err := copyOut(e, transfer.OutOptions{Src: "/tmp/big.bin", Dst: dst})
		if err != nil {
			t.Fatalf("copy out: %v", err)
		}
		if got, _ := fileSHA(dst); got != want {
			t.Errorf("round trip changed the file: %s, want %s", got, want)
		}
		if in.Stats.Bytes != 100<<20 || out.Stats.Bytes != 100<<20 || out.Stats.Files != 1 {
			t.Errorf("stats in %+v out %+v", in.Stats, out.Stats)
		}
		t.Logf("100 MiB: in %s, out %s", in.Duration.Round(time.Millisecond), out.Duration.Round(time.Millisecond))
	})
}

func TestCopyRoundTrip2000Files(t *testing.T) {
	sandboxtest.ViaBoth(t, func(t *testing.T, iso string, agents bool) {
		e := sandboxtest.NewVia(t, agents, sandboxtest.Isolated(iso, nil))
		src := filepath.Join(t.TempDir(), "tree")
		for i := range 2000 {
			p := filepath.Join(src, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("sub%d", i%3), fmt.Sprintf("f%04d.txt", i))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 100+i%900)
			_, _ = rand.Read(data)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, n := treeDigest(t, src)
		if n != 2000 {
			t.Fatalf("made %d files", n)
		}
		in, err := copyIn(e, transfer.InOptions{Src: src, Dst: "/tmp/"})
		if err != nil {
			t.Fatalf("copy in: %v", err)
		}
		if o := e.Sh("find /tmp/tree -type f | wc -l; ls -a /tmp | grep -c sbx-cp"); o.Stdout != "2000\n0\n" {
			t.Errorf("in the sandbox: %q %q", o.Stdout, o.Stderr)
		}
		host := t.TempDir()
		out, err := copyOut(e, transfer.OutOptions{Src: "/tmp/tree", Dst: host})
		if err != nil {
			t.Fatalf("copy out: %v", err)
		}
		if got, n := treeDigest(t, filepath.Join(host, "tree")); got != want || n != 2000 {
			t.Errorf("round trip changed the tree (%d files)", n)
		}
		if in.Stats.Files != 2000 || out.Stats.Files != 2000 {
			t.Errorf("stats in %+v out %+v", in.Stats, out.Stats)
		}
		t.Logf("2000 files: in %s, out %s", in.Duration.Round(time.Millisecond), out.Duration.Round(time.Millisecond))
	})
}

func TestCopyIntoTmpfsAndNoneWorkspaceIsVisibleToExec(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, func(c *config.Config) { c.Workspace = "none" }))
		src := filepath.Join(t.TempDir(), "note.txt")
		if err := os.WriteFile(src, []byte("hello sandbox\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, dst := range []string{"/tmp/note.txt", "/workspace/note.txt", "/var/tmp/"} {
			if _, err := copyIn(e, transfer.InOptions{Src: src, Dst: dst}); err != nil {
				t.Fatalf("copy to %s: %v", dst, err)
			}
		}
		o := e.Sh("cat /tmp/note.txt /workspace/note.txt /var/tmp/note.txt; find /workspace/note.txt -printf '%U:%G %m\\n'")
		if o.Stdout != "hello sandbox\nhello sandbox\nhello sandbox\n1000:1000 644\n" {
			t.Errorf("after the copies: %q %q", o.Stdout, o.Stderr)
		}
	})
}

func TestCopyIntoReadOnlyPlacesIsRefused(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil)) // workspace ro, read-only root
		src := filepath.Join(t.TempDir(), "x")
		if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		for dst, mount := range map[string]string{"/workspace/x": "/workspace", "/workspace/": "/workspace", "/etc/x": "/", "/x": "/"} {
			_, err := copyIn(e, transfer.InOptions{Src: src, Dst: dst})
			var ce *transfer.Error
			if !errors.As(err, &ce) || ce.Kind != transfer.ReadOnly || ce.Mount != mount {
				t.Errorf("copy to %s: %v (%+v), want read-only at %s", dst, err, ce, mount)
			}
		}
		if _, err := os.Stat(filepath.Join(e.Dir, "x")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the project got a file: %v", err)
		}
	})
}

func TestCopyOutRefusesSymlinksAndFIFOs(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		if o := e.Sh("mkdir -p /tmp/t && echo ok >/tmp/t/a && ln -s /etc/passwd /tmp/t/passwd && ln -s / /tmp/t/root && mkfifo /tmp/fifo && ln -s /etc/passwd /tmp/link"); o.Res.ExitCode != 0 {
			t.Fatalf("setup: %q", o.Stderr)
		}
		parent := t.TempDir()
		for _, tt := range []struct {
			src  string
			want func(error) bool
		}{
			{"/tmp/t", func(err error) bool { return errors.Is(err, archive.ErrSymlink) }},
			{"/tmp/fifo", func(err error) bool { return errors.Is(err, archive.ErrFIFO) }},
			{"/tmp/link", func(err error) bool {
				var ce *transfer.Error
				return errors.As(err, &ce) && ce.Kind == transfer.Symlink && ce.Target == "/etc/passwd"
			}},
		} {
			done := make(chan error, 1)
			go func() {
				_, err := copyOut(e, transfer.OutOptions{Src: tt.src, Dst: filepath.Join(parent, "out")})
				done <- err
			}()
			select {
			case err := <-done:
				if !tt.want(err) {
					t.Errorf("%s: %v", tt.src, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("copying %s out hangs", tt.src)
			}
		}
		if ents, _ := os.ReadDir(parent); len(ents) != 0 {
			t.Errorf("refused copies wrote %v", ents)
		}
	})
}

func TestCopyInStripsSetuidAndKeepsOnlyOwnOwner(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "suid", Typeflag: tar.TypeReg, Mode: 0o6755, Size: 2})
		_, _ = tw.Write([]byte("x\n"))
		tw.Close()
		if _, err := copyIn(e, transfer.InOptions{Stream: &buf, Dst: "/tmp"}); err != nil {
			t.Fatal(err)
		}
		if o := e.Sh("find /tmp/suid -printf '%m %U\\n'"); o.Stdout != "755 1000\n" {
			t.Errorf("setuid file: %q %q", o.Stdout, o.Stderr)
		}

		testenv.RequireRoot(t, "chowning files on the host for the -a cases")
		dir := t.TempDir()
		mine, theirs := filepath.Join(dir, "mine"), filepath.Join(dir, "theirs")
		for _, p := range []string{mine, theirs} {
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(mine, archive.DefaultUID, archive.DefaultGID); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if _, err := copyIn(e, transfer.InOptions{Src: mine, Dst: "/tmp/mine", KeepOwner: true}); err != nil {
			t.Errorf("-a with the sandbox user's own file: %v", err)
		}
		_, err := copyIn(e, transfer.InOptions{Src: theirs, Dst: "/tmp/theirs", KeepOwner: true})
		var ce *transfer.Error
		if !errors.As(err, &ce) || ce.Kind != transfer.Owner || !strings.Contains(err.Error(), "uid 4242") {
			t.Errorf("-a with a foreign owner: %v", err)
		}
		if o := e.Sh("find /tmp -mindepth 1 -maxdepth 1 -printf '%f\\n'"); strings.Contains(o.Stdout, "theirs") || strings.Contains(o.Stdout, ".sbx-cp") {
			t.Errorf("a refused copy left: %q", o.Stdout)
		}
	})
}

func TestCopyInCleansSandboxLeftovers(t *testing.T) {
	sandboxtest.OnEach(t, func(t *testing.T, iso string) {
		e := sandboxtest.New(t, sandboxtest.Isolated(iso, nil))
		if o := e.Sh("mkdir -p /tmp/d/.sbx-cp-stale/item && echo half >/tmp/d/.sbx-cp-stale/item/f"); o.Res.ExitCode != 0 {
			t.Fatal(o.Stderr)
		}
		src := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(src, []byte("whole\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := copyIn(e, transfer.InOptions{Src: src, Dst: "/tmp/d/f"}); err != nil {
			t.Fatal(err)
		}
		if o := e.Sh("find /tmp/d -mindepth 1 -maxdepth 1 -printf '%f\\n'; cat /tmp/d/f"); o.Stdout != "f\nwhole\n" {
			t.Errorf("after the copy: %q", o.Stdout)
		}
	})
}

func TestCopyIntoFullTmpfsWritesNothing(t *testing.T) {
	sandboxtest.ViaBoth(t, func(t *testing.T, iso string, agents bool) {
		e := sandboxtest.NewVia(t, agents, sandboxtest.Isolated(iso, func(c *config.Config) {
			c.Tmpfs = []config.Tmpfs{{Path: "/tmp", Options: []string{"size=8m", "nosuid", "nodev", "noexec", "mode=1777"}}}
		}))
		src := filepath.Join(t.TempDir(), "big")
		if err := os.WriteFile(src, make([]byte, 16<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := copyIn(e, transfer.InOptions{Src: src, Dst: "/tmp/big"})
		var ce *transfer.Error
		if !errors.As(err, &ce) || ce.Kind != transfer.NoSpace {
			t.Fatalf("err = %v, want no space", err)
		}
		if o := e.Sh("find /tmp -mindepth 1 -maxdepth 1 -printf '%f\\n' | grep -v '^.sbx-exec$'; df -k /tmp | tail -1"); strings.Contains(o.Stdout, "big") || strings.Contains(o.Stdout, ".sbx-cp") {
			t.Errorf("a failed copy left: %q", o.Stdout)
		}
	})
}
