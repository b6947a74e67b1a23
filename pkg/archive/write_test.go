package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// headers lists an archive's entries as "name type mode uid:gid [-> link]".
func headers(t *testing.T, b []byte) []*tar.Header {
	t.Helper()
	var out []*tar.Header
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, hdr)
	}
}

func names(hdrs []*tar.Header) string {
	var s []string
	for _, h := range hdrs {
		s = append(s, h.Name)
	}
	return strings.Join(s, " ")
}

// sourceTree builds a tree with files of several modes, empty and nested directories, and a
// file large enough to span many buffers.
func sourceTree(t testing.TB, root string) {
	t.Helper()
	mkTree(t, root, map[string]string{
		"a.txt": "alpha", "exec.sh": "#!/bin/sh\n", "secret": "s", "ro": "r",
		"empty/": "", "deep/er/still/": "", "deep/er/f": "deep file", "deep/g": "",
	})
	big := make([]byte, 3*bufSize+17)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(root, "deep/big.bin"), big, 0o640); err != nil {
		t.Fatal(err)
	}
	for p, m := range map[string]fs.FileMode{"exec.sh": 0o755, "secret": 0o600, "ro": 0o400, "deep/er": 0o750} {
		if err := os.Chmod(filepath.Join(root, p), m); err != nil {
			t.Fatal(err)
		}
	}
	// tar keeps whole seconds; set every time so the round trip can compare them.
	stamp := time.Date(2023, 1, 2, 3, 4, 5, 0, time.UTC)
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, stamp, stamp)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, contents := range []bool{false, true} {
		t.Run(map[bool]string{false: "item", true: "contents"}[contents], func(t *testing.T) {
			work := t.TempDir()
			src := filepath.Join(work, "src")
			sourceTree(t, src)
			dst := filepath.Join(work, "dst")

			// Stream through a pipe, as sbx cp does between the two ends.
			pr, pw := io.Pipe()
			var wst Stats
			go func() {
				var err error
				wst, err = WriteTar(context.Background(), pw, src, WriteOptions{Contents: contents})
				pw.CloseWithError(err)
			}()
			base := "src"
			if contents {
				base = "."
			}
			xst, err := Extract(context.Background(), pr, dst, ExtractOptions{Base: base})
			if err != nil {
				t.Fatal(err)
			}
			if d := diffSnap(snapshot(t, src), snapshot(t, dst)); d != "" {
				t.Errorf("round trip differs:\n%s", d)
			}
			if wst.Files != 7 || wst.Bytes != xst.Bytes || wst.Files != xst.Files {
				t.Errorf("WriteTar stats %+v, Extract stats %+v", wst, xst)
			}
			_ = filepath.WalkDir(src, func(p string, _ fs.DirEntry, _ error) error {
				rel, _ := filepath.Rel(src, p)
				if contents && rel == "." {
					return nil // contents carry no top entry, so no top times
				}
				a, _ := os.Stat(p)
				b, err := os.Stat(filepath.Join(dst, rel))
				if err != nil || !a.ModTime().Equal(b.ModTime()) {
					t.Errorf("%s: mtime %v, want %v (%v)", rel, b.ModTime(), a.ModTime(), err)
				}
				return nil
			})
		})
	}
}

func TestWriteTarNamesAndOwners(t *testing.T) {
	work := t.TempDir()
	mkTree(t, work, map[string]string{"src/x": "x", "src/sub/y": "y", "a.txt": "A"})
	write := func(src string, opts WriteOptions) []*tar.Header {
		t.Helper()
		var buf bytes.Buffer
		if _, err := WriteTar(context.Background(), &buf, filepath.Join(work, src), opts); err != nil {
			t.Fatal(err)
		}
		return headers(t, buf.Bytes())
	}
	for _, tc := range []struct {
		name string
		src  string
		opts WriteOptions
		want string
	}{
		{"directory", "src", WriteOptions{}, "src/ src/sub/ src/sub/y src/x"},
		{"renamed directory", "src", WriteOptions{Name: "other"}, "other/ other/sub/ other/sub/y other/x"},
		{"contents", "src", WriteOptions{Contents: true}, "sub/ sub/y x"},
		{"file", "a.txt", WriteOptions{}, "a.txt"},
		{"renamed file", "a.txt", WriteOptions{Name: "b.txt"}, "b.txt"},
	} {
		if got := names(write(tc.src, tc.opts)); got != tc.want {
			t.Errorf("%s: entries %q; want %q", tc.name, got, tc.want)
		}
	}
	for _, h := range write("src", WriteOptions{}) {
		if h.Uid != DefaultUID || h.Gid != DefaultGID || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q; want %d:%d and no names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, DefaultUID, DefaultGID)
		}
	}
	for _, h := range write("src", WriteOptions{Owner: &Owner{UID: 1500, GID: 1600}}) {
		if h.Uid != 1500 || h.Gid != 1600 {
			t.Errorf("%s: owner %d:%d; want 1500:1600", h.Name, h.Uid, h.Gid)
		}
	}
	if os.Getuid() == 0 {
		if err := os.Lchown(filepath.Join(work, "src/x"), 4242, 4343); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range write("src", WriteOptions{KeepOwner: true}) {
		fi, _ := os.Lstat(filepath.Join(work, filepath.FromSlash(strings.TrimSuffix(h.Name, "/"))))
		if uid, gid := fileOwner(fi); h.Uid != uid || h.Gid != gid {
			t.Errorf("%s: owner %d:%d; want the host's %d:%d", h.Name, h.Uid, h.Gid, uid, gid)
		}
	}
}

func TestWriteTarStripsSetuid(t *testing.T) {
	work := t.TempDir()
	mkTree(t, work, map[string]string{"src/suid": "s", "src/sticky/": ""})
	for p, m := range map[string]fs.FileMode{"src/suid": 0o755 | fs.ModeSetuid | fs.ModeSetgid, "src/sticky": 0o777 | fs.ModeSticky | fs.ModeSetgid} {
		if err := os.Chmod(filepath.Join(work, p), m); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := WriteTar(context.Background(), &buf, filepath.Join(work, "src"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"src/": 0o755, "src/sticky/": 0o1777, "src/suid": 0o755}
	for _, h := range headers(t, buf.Bytes()) {
		if h.Mode != want[h.Name] {
			t.Errorf("%s: mode %o; want %o", h.Name, h.Mode, want[h.Name])
		}
	}
}

func TestWriteTarSymlinks(t *testing.T) {
	work := t.TempDir()
	mkTree(t, work, map[string]string{"src/d/f": "f", "src/top": "t", "outside/secret": "s"})
	src := filepath.Join(work, "src")
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("inside the tree are kept", func(t *testing.T) {
		link("d/f", "to-file")
		link("../top", "d/up")
		link("d", "to-dir")
		link("missing", "dangling")
		defer func() {
			for _, n := range []string{"to-file", "d/up", "to-dir", "dangling"} {
				os.Remove(filepath.Join(src, n))
			}
		}()
		var buf bytes.Buffer
		st, err := WriteTar(context.Background(), &buf, src, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, h := range headers(t, buf.Bytes()) {
			if h.Typeflag == tar.TypeSymlink {
				got[h.Name] = h.Linkname
			}
		}
		want := map[string]string{"src/to-file": "d/f", "src/d/up": "../top", "src/to-dir": "d", "src/dangling": "missing"}
		if len(got) != len(want) || st.Symlinks != 4 {
			t.Fatalf("symlinks %v (stats %+v); want %v", got, st, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s -> %q; want %q", k, got[k], v)
			}
		}
	})
	for _, tc := range []struct{ name, target, at string }{
		{"out of the tree", "../outside/secret", "leak"},
		{"out and back in", "../src/top", "back"},
		{"absolute", filepath.Join(work, "outside/secret"), "abs"},
		{"to the root", "/", "root"},
		{"via a link to the tree root", "self/..", "esc"},
		{"dangling past the root", "missing/../../../x", "far"},
		{"loop", "loop", "loop"},
	} {
		t.Run("refused "+tc.name, func(t *testing.T) {
			link(".", "self")
			link(tc.target, tc.at)
			defer os.Remove(filepath.Join(src, "self"))
			defer os.Remove(filepath.Join(src, tc.at))
			_, err := WriteTar(context.Background(), io.Discard, src, WriteOptions{})
			var se *SourceError
			if !errors.Is(err, ErrLinkOutside) || !errors.As(err, &se) || se.Path != filepath.Join(src, tc.at) {
				t.Fatalf("err = %v; want ErrLinkOutside naming %s", err, filepath.Join(src, tc.at))
			}
		})
	}
	t.Run("top-level link", func(t *testing.T) {
		top := filepath.Join(work, "top-link")
		if err := os.Symlink("src", top); err != nil {
			t.Fatal(err)
		}
		_, err := WriteTar(context.Background(), io.Discard, top, WriteOptions{})
		if err == nil || !strings.Contains(errs.Hint(err), "--follow-link") {
			t.Fatalf("err = %v (hint %q); want a refusal hinting --follow-link", err, errs.Hint(err))
		}
		var buf bytes.Buffer
		if _, err := WriteTar(context.Background(), &buf, top, WriteOptions{FollowLink: true}); err != nil {
			t.Fatal(err)
		}
		if got := names(headers(t, buf.Bytes())); got != "top-link/ top-link/d/ top-link/d/f top-link/top" {
			t.Errorf("entries %q", got)
		}
	})
}

func TestWriteTarErrors(t *testing.T) {
	work := t.TempDir()
	mkTree(t, work, map[string]string{"src/a": "a", "f": "f"})
	for _, tc := range []struct {
		name string
		src  string
		opts WriteOptions
		want string
	}{
		{"contents of a file", "f", WriteOptions{Contents: true}, "no contents"},
		{"bad name", "f", WriteOptions{Name: "a/b"}, "cannot name"},
		{"missing", "nope", WriteOptions{}, "no such file"},
	} {
		_, err := WriteTar(context.Background(), io.Discard, filepath.Join(work, tc.src), tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want %q", tc.name, err, tc.want)
		}
	}
	if _, err := WriteTar(context.Background(), io.Discard, ".", WriteOptions{}); err == nil || errs.Hint(err) == "" {
		t.Errorf(`WriteTar(".") = %v; want a refusal with a hint`, err)
	}
}

func TestWriteTarCancelAndProgress(t *testing.T) {
	work := t.TempDir()
	sourceTree(t, work)
	var calls int
	var last Stats
	st, err := WriteTar(context.Background(), io.Discard, work, WriteOptions{Progress: func(s Stats) { calls++; last = s }})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 || last != st {
		t.Errorf("progress called %d times, last %+v; want final %+v", calls, last, st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var buf bytes.Buffer
	_, err = WriteTar(ctx, &buf, work, WriteOptions{Progress: func(Stats) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	// The cut stream has no end-of-archive marker, so Extract refuses it.
	_, err = Extract(context.Background(), &buf, filepath.Join(t.TempDir(), "out"), ExtractOptions{Base: filepath.Base(work)})
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrSizeMismatch) {
		t.Errorf("Extract of a cancelled stream = %v; want it refused", err)
	}
}
