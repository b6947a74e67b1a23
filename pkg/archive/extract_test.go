package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// refusal is an archive that Extract must refuse, naming wantEntry.
type refusal struct {
	name      string
	build     func(t testing.TB, work string) []byte
	opts      ExtractOptions
	wantIs    error  // a reason for an *EntryError
	wantFlag  string // or the flag of a *LimitError
	wantEntry string // "" when the archive has no entry to name
}

func refusals() []refusal {
	ents := func(es ...ent) func(testing.TB, string) []byte {
		return func(t testing.TB, _ string) []byte { return tarOf(t, es...) }
	}
	twenty := strings.Repeat("x", 20)
	return []refusal{
		{name: "absolute name", wantIs: ErrAbsolute,
			build: func(t testing.TB, work string) []byte {
				return tarOf(t, dir("base/"), file(filepath.ToSlash(work)+"/outside/pwned", "x"))
			}},
		{name: "leaves root after cleaning", wantIs: ErrEscapes, wantEntry: "base/../../outside/pwned",
			build: ents(dir("base/"), file("base/../../outside/pwned", "x"))},
		{name: "parent name", wantIs: ErrEscapes, wantEntry: "../outside/pwned",
			build: ents(file("../outside/pwned", "x"))},
		{name: "dotdot that stays inside", wantIs: ErrDotDot, wantEntry: "base/a/../b",
			build: ents(dir("base/"), file("base/a/../b", "x"))},
		{name: "sibling sharing the base prefix", wantIs: ErrOutsideBase, wantEntry: "base2/pwned",
			build: ents(dir("base/"), file("base2/pwned", "x"))},
		{name: "other top-level name", wantIs: ErrOutsideBase, wantEntry: "other",
			build: ents(file("other", "x"))},
		{name: "backslash", wantIs: ErrBadChar, wantEntry: `base\..\..\outside\pwned`,
			build: ents(dir("base/"), file(`base\..\..\outside\pwned`, "x"))},
		{name: "name too long", wantIs: ErrLongName, wantEntry: "base/" + strings.Repeat("a/", 2100) + "f",
			build: ents(file("base/"+strings.Repeat("a/", 2100)+"f", "x"))},
		{name: "symlink to /etc/passwd", wantIs: ErrSymlink, wantEntry: "base/passwd",
			build: ents(dir("base/"), ent{name: "base/passwd", typ: tar.TypeSymlink, link: "/etc/passwd"})},
		{name: "symlink to /", wantIs: ErrSymlink, wantEntry: "base/root",
			build: ents(dir("base/"), ent{name: "base/root", typ: tar.TypeSymlink, link: "/"})},
		{name: "symlink then a write through it", wantIs: ErrSymlink, wantEntry: "base/l",
			build: ents(dir("base/"), ent{name: "base/l", typ: tar.TypeSymlink, link: "../outside"}, file("base/l/pwned", "x"))},
		{name: "base itself a symlink", wantIs: ErrSymlink, wantEntry: "base",
			build: ents(ent{name: "base", typ: tar.TypeSymlink, link: "/"})},
		{name: "hardlink out", wantIs: ErrHardlink, wantEntry: "base/h",
			build: ents(dir("base/"), ent{name: "base/h", typ: tar.TypeLink, link: "/etc/passwd"})},
		{name: "hardlink inside", wantIs: ErrHardlink, wantEntry: "base/h",
			build: ents(dir("base/"), file("base/a", "a"), ent{name: "base/h", typ: tar.TypeLink, link: "base/a"})},
		{name: "char device", wantIs: ErrDevice, wantEntry: "base/null",
			build: ents(dir("base/"), ent{name: "base/null", typ: tar.TypeChar})},
		{name: "block device", wantIs: ErrDevice, wantEntry: "base/sda",
			build: ents(dir("base/"), ent{name: "base/sda", typ: tar.TypeBlock})},
		{name: "fifo", wantIs: ErrFIFO, wantEntry: "base/fifo",
			build: ents(dir("base/"), ent{name: "base/fifo", typ: tar.TypeFifo})},
		{name: "contiguous file type", wantIs: ErrUnsupported, wantEntry: "base/c",
			build: ents(dir("base/"), ent{name: "base/c", typ: tar.TypeCont})},
		{name: "data shorter than header", wantIs: ErrSizeMismatch, wantEntry: "base/f",
			build: func(t testing.TB, _ string) []byte {
				return tarOf(t, file("base/f", strings.Repeat("x", 100)))[:blockSize+10]
			}},
		{name: "data longer than header, within padding", wantIs: ErrSizeMismatch, wantEntry: "base/f",
			build: func(t testing.TB, _ string) []byte {
				return setSize(tarOf(t, dir("base/"), file("base/f", twenty), file("base/g", "g")), blockSize, 10)
			}},
		{name: "data longer than header, past the block", wantIs: ErrCorrupt, wantEntry: "base/f",
			build: func(t testing.TB, _ string) []byte {
				return setSize(tarOf(t, dir("base/"), file("base/f", strings.Repeat("A", 1024))), blockSize, 512)
			}},
		{name: "directory with data", wantIs: ErrSizeMismatch, wantEntry: "base/",
			build: func(t testing.TB, _ string) []byte {
				return setSize(tarOf(t, dir("base/"), file("base/f", twenty)), 0, 5)
			}},
		{name: "no end-of-archive marker", wantIs: ErrCorrupt, wantEntry: "base/f",
			build: func(t testing.TB, _ string) []byte {
				return tarOf(t, dir("base/"), file("base/f", "abc"))[:3*blockSize]
			}},
		{name: "half an end-of-archive marker", wantIs: ErrCorrupt, wantEntry: "base/f",
			build: func(t testing.TB, _ string) []byte {
				return tarOf(t, dir("base/"), file("base/f", "abc"))[:4*blockSize]
			}},
		{name: "data after the end-of-archive marker", wantIs: ErrCorrupt, wantEntry: "base/f",
			build: func(t testing.TB, _ string) []byte {
				return append(tarOf(t, dir("base/"), file("base/f", "abc")), "trailing garbage"...)
			}},
		{name: "file below a file", wantIs: ErrConflict, wantEntry: "base/f/x",
			build: ents(dir("base/"), file("base/f", "f"), file("base/f/x", "x"))},
		{name: "directory over a file", wantIs: ErrConflict, wantEntry: "base/f/",
			build: ents(dir("base/"), file("base/f", "f"), dir("base/f/"))},
		{name: "file over a directory", wantIs: ErrConflict, wantEntry: "base/d",
			build: ents(dir("base/"), dir("base/d/"), file("base/d", "x"))},
		{name: "empty archive", wantIs: ErrCorrupt, build: ents()},
		{name: "not an archive", wantIs: ErrCorrupt,
			build: func(testing.TB, string) []byte { return []byte("not a tar stream") }},
		{name: "NUL in a PAX path", wantIs: ErrCorrupt,
			build: func(t testing.TB, _ string) []byte {
				long := "base/" + strings.Repeat("a", 120) + "X"
				b := tarOf(t, file(long, "x"))
				i := bytes.Index(b, []byte("path="+long))
				b[i+len("path=")+len(long)-1] = 0
				return b
			}},
		{name: "total size cap", wantFlag: "--max-bytes", wantEntry: "base/g", opts: ExtractOptions{MaxBytes: 10},
			build: ents(dir("base/"), file("base/f", "123456"), file("base/g", "123456"))},
		{name: "entry count cap", wantFlag: "--max-entries", wantEntry: "base/g", opts: ExtractOptions{MaxEntries: 2},
			build: ents(dir("base/"), file("base/f", "f"), file("base/g", "g"))},
		{name: "path depth cap", wantFlag: "--max-depth", wantEntry: "base/a/b/c", opts: ExtractOptions{MaxDepth: 3},
			build: ents(dir("base/"), file("base/a/b", "ok"), file("base/a/b/c", "deep"))},
	}
}

func TestExtractRefuses(t *testing.T) {
	for _, tc := range refusals() {
		for _, existing := range []bool{false, true} {
			label := "dst missing"
			if existing {
				label = "dst exists"
			}
			t.Run(tc.name+"/"+label, func(t *testing.T) {
				work := t.TempDir()
				mkTree(t, work, map[string]string{"outside/keep": "keep"})
				dst := filepath.Join(work, "dst")
				if existing {
					mkTree(t, work, map[string]string{"dst/old": "old", "dst/base/old": "old"})
				}
				archive := tc.build(t, work)
				before := snapshot(t, work)
				opts := tc.opts
				opts.Base = "base"
				_, err := Extract(context.Background(), bytes.NewReader(archive), dst, opts)
				checkRefusal(t, err, tc, work)
				if d := diffSnap(before, snapshot(t, work)); d != "" {
					t.Errorf("refused extraction changed the filesystem:\n%s", d)
				}
			})
		}
	}
}

func checkRefusal(t *testing.T, err error, tc refusal, work string) {
	t.Helper()
	if err == nil {
		t.Fatal("Extract succeeded; want it refused")
	}
	want := tc.wantEntry
	if tc.name == "absolute name" {
		want = filepath.ToSlash(work) + "/outside/pwned"
	}
	if tc.wantFlag != "" {
		var le *LimitError
		if !errors.As(err, &le) || le.Flag != tc.wantFlag || le.Entry != want {
			t.Fatalf("err = %v; want a LimitError for %s at %q", err, tc.wantFlag, want)
		}
		if !strings.Contains(le.Hint(), tc.wantFlag) {
			t.Errorf("hint %q does not say how to raise the cap", le.Hint())
		}
	} else if !errors.Is(err, tc.wantIs) {
		t.Fatalf("err = %v; want %v", err, tc.wantIs)
	}
	for _, kind := range []error{ErrSymlink, ErrHardlink, ErrDevice, ErrFIFO, ErrUnsupported} {
		if errors.Is(err, kind) && !strings.Contains(errs.Hint(err), "sbx cp NAME:PATH -") {
			t.Errorf("hint %q does not offer the raw stream", errs.Hint(err))
		}
	}
	if want != "" {
		var ee *EntryError
		if tc.wantFlag == "" && (!errors.As(err, &ee) || ee.Name != want) {
			t.Fatalf("err = %v; want an EntryError naming %q", err, want)
		}
		if !strings.Contains(err.Error(), quoteName(want)) {
			t.Errorf("error %q does not name the entry %q", err, want)
		}
	}
}

func TestEntryErrorShortensLongNames(t *testing.T) {
	long := strings.Repeat("\x1b[31m", 1000)
	msg := (&EntryError{Name: long, Err: ErrLongName}).Error()
	if len(msg) > 2*maxQuoted+100 || strings.Contains(msg, "\x1b") {
		t.Errorf("message is %d bytes or holds a raw escape: %.80q", len(msg), msg)
	}
}

func TestCleanName(t *testing.T) {
	for _, tc := range []struct {
		name, base, want string
		err              error
	}{
		{"base", "base", "base", nil},
		{"base/", "base", "base", nil},
		{"./base/x", "base", "base/x", nil},
		{"base//x/./y", "base", "base/x/y", nil},
		{"./", ".", ".", nil},
		{"x/y", ".", "x/y", nil},
		{"", "base", "", ErrEmptyName},
		{"base/a\x00b", "base", "", ErrBadChar},
		{"base/a\\b", "base", "", ErrBadChar},
		{"/base/x", "base", "", ErrAbsolute},
		{"//x", ".", "", ErrAbsolute},
		{"..", ".", "", ErrEscapes},
		{"x/../..", ".", "", ErrEscapes},
		{"base/../base/x", "base", "", ErrDotDot},
		{"basex", "base", "", ErrOutsideBase},
		{"base2/x", "base", "", ErrOutsideBase},
		{".", "base", "", ErrOutsideBase},
	} {
		got, err := cleanName(tc.name, tc.base)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("cleanName(%q, %q) = %q, %v; want %q, %v", tc.name, tc.base, got, err, tc.want, tc.err)
		}
	}
}

var (
	dirItem = []ent{dir("base/"), dir("base/sub/"), file("base/sub/f", "F"), file("base/top", "T"), dir("base/empty/")}
	fileRec = []ent{file("base", "X")}
)

func TestExtractDestinationRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    map[string]string
		dst      string
		archive  []ent
		base     string
		contents bool
		want     map[string]string // path -> content; "/" suffix for a directory
		wantErr  string
	}{
		{name: "missing dst becomes the directory", dst: "out", archive: dirItem,
			want: map[string]string{"out/top": "T", "out/sub/f": "F", "out/empty/": ""}},
		{name: "missing dst becomes the file", dst: "out.txt", archive: fileRec,
			want: map[string]string{"out.txt": "X"}},
		{name: "missing dst with slash, directory", dst: "out/", archive: dirItem,
			want: map[string]string{"out/top": "T"}},
		{name: "missing dst with slash, file", dst: "out/", archive: fileRec,
			wantErr: "does not exist"},
		{name: "missing parent", dst: "nope/out", archive: fileRec, wantErr: "does not exist"},
		{name: "into an existing directory", setup: map[string]string{"d/": ""}, dst: "d", archive: dirItem,
			want: map[string]string{"d/base/top": "T", "d/base/sub/f": "F", "d/base/empty/": ""}},
		{name: "file into an existing directory", setup: map[string]string{"d/": ""}, dst: "d/", archive: fileRec,
			want: map[string]string{"d/base": "X"}},
		{name: "merge into an existing copy",
			setup: map[string]string{"d/base/top": "old", "d/base/keep": "K", "d/base/sub/": ""}, dst: "d", archive: dirItem,
			want: map[string]string{"d/base/top": "T", "d/base/keep": "K", "d/base/sub/f": "F"}},
		{name: "contents into an existing directory", setup: map[string]string{"d/keep": "K"}, dst: "d",
			archive: dirItem, contents: true,
			want: map[string]string{"d/top": "T", "d/sub/f": "F", "d/keep": "K", "d/empty/": ""}},
		{name: "contents into a missing directory", dst: "out", archive: dirItem, contents: true,
			want: map[string]string{"out/top": "T", "out/sub/f": "F"}},
		{name: "file replaces a file", setup: map[string]string{"f.txt": "old"}, dst: "f.txt", archive: fileRec,
			want: map[string]string{"f.txt": "X"}},
		{name: "directory onto a file", setup: map[string]string{"f.txt": "old"}, dst: "f.txt", archive: dirItem,
			wantErr: "cannot overwrite non-directory"},
		{name: "file dst written as a directory", setup: map[string]string{"f.txt": "old"}, dst: "f.txt/", archive: fileRec,
			wantErr: "not a directory"},
		{name: "contents of a file", dst: "out", archive: fileRec, contents: true, wantErr: "not a directory"},
		{name: "directory onto dst/base file", setup: map[string]string{"d/base": "old"}, dst: "d", archive: dirItem,
			wantErr: "cannot overwrite non-directory"},
		{name: "file onto dst/base directory", setup: map[string]string{"d/base/": ""}, dst: "d", archive: fileRec,
			wantErr: "cannot overwrite directory"},
		{name: "merge: file onto a directory", setup: map[string]string{"d/base/keep": "K", "d/base/top/": ""}, dst: "d",
			archive: dirItem, wantErr: "cannot overwrite directory"},
		{name: "merge: directory onto a file", setup: map[string]string{"d/base/keep": "K", "d/base/sub": "file"}, dst: "d",
			archive: dirItem, wantErr: "cannot overwrite non-directory"},
		{name: "base dot into a missing dst", dst: "out", base: ".",
			archive: []ent{dir("./"), file("./top", "T"), dir("./sub/"), file("./sub/f", "F")},
			want:    map[string]string{"out/top": "T", "out/sub/f": "F"}},
		{name: "base dot merges", setup: map[string]string{"d/keep": "K"}, dst: "d", base: ".",
			archive: []ent{dir("./"), file("./top", "T")},
			want:    map[string]string{"d/top": "T", "d/keep": "K"}},
		{name: "leading ./ and implicit directories", dst: "out",
			archive: []ent{file("./base/a/b/c", "C")},
			want:    map[string]string{"out/a/b/c": "C"}},
		{name: "a later duplicate wins", dst: "out",
			archive: []ent{dir("base/"), file("base/f", "one"), file("base/f", "two")},
			want:    map[string]string{"out/f": "two"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			mkTree(t, work, tc.setup)
			before := snapshot(t, work)
			base := tc.base
			if base == "" {
				base = "base"
			}
			dst := filepath.Join(work, tc.dst)
			if strings.HasSuffix(tc.dst, "/") {
				dst += "/"
			}
			_, err := Extract(context.Background(), bytes.NewReader(tarOf(t, tc.archive...)), dst,
				ExtractOptions{Base: base, Contents: tc.contents})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want %q", err, tc.wantErr)
				}
				if d := diffSnap(before, snapshot(t, work)); d != "" {
					t.Errorf("failed extraction changed the filesystem:\n%s", d)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for p, body := range tc.want {
				full := filepath.Join(work, filepath.FromSlash(p))
				if strings.HasSuffix(p, "/") {
					if fi, err := os.Stat(full); err != nil || !fi.IsDir() {
						t.Errorf("%s: want a directory (%v)", p, err)
					}
				} else if got := readFile(t, full); got != body {
					t.Errorf("%s = %q; want %q", p, got, body)
				}
			}
			assertNoStaging(t, work)
		})
	}
}

func assertNoStaging(t *testing.T, root string) {
	t.Helper()
	for p := range snapshot(t, root) {
		if strings.Contains(p, StagingPrefix) {
			t.Errorf("staging leftover %s", p)
		}
	}
}

func TestExtractDoesNotFollowSymlinksInDestination(t *testing.T) {
	work := t.TempDir()
	mkTree(t, work, map[string]string{"elsewhere/keep": "K", "d/base/keep": "K"})
	if err := os.Symlink("../../elsewhere", filepath.Join(work, "d/base/sub")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, work)
	_, err := Extract(context.Background(), bytes.NewReader(tarOf(t, dirItem...)), filepath.Join(work, "d"), ExtractOptions{Base: "base"})
	if err == nil || !strings.Contains(err.Error(), "cannot overwrite non-directory") {
		t.Fatalf("err = %v; want the symlink treated as a file", err)
	}
	if d := diffSnap(before, snapshot(t, work)); d != "" {
		t.Errorf("changed:\n%s", d)
	}
}

func TestExtractModesOwnershipTimes(t *testing.T) {
	work := t.TempDir()
	archive := tarOf(t,
		ent{name: "base/", typ: tar.TypeDir, mode: 0o1777},
		ent{name: "base/suid", typ: tar.TypeReg, mode: 0o6755, body: "s"},
		ent{name: "base/ro/", typ: tar.TypeDir, mode: 0o555},
		ent{name: "base/ro/f", typ: tar.TypeReg, mode: 0o400, body: "r"},
	)
	dst := filepath.Join(work, "out")
	st, err := Extract(context.Background(), bytes.NewReader(archive), dst, ExtractOptions{Base: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{Files: 2, Dirs: 2, Bytes: 2}); st != want {
		t.Errorf("stats = %+v; want %+v", st, want)
	}
	for p, want := range map[string]fs.FileMode{"": fs.ModeDir | 0o777, "suid": 0o755, "ro": fs.ModeDir | 0o555, "ro/f": 0o400} {
		fi, err := os.Stat(filepath.Join(dst, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v; want %v (special bits dropped)", p, fi.Mode(), want)
		}
		if !fi.ModTime().Equal(testTime) {
			t.Errorf("%s: mtime %v; want %v", p, fi.ModTime(), testTime)
		}
		if uid, gid := fileOwner(fi); ownerSupported && uid != os.Getuid() || gid != os.Getgid() {
			t.Errorf("%s: owner %d:%d; want the caller's, not the archive's 4242", p, uid, gid)
		}
	}
	// Make the test directory removable for a non-root run.
	_ = os.Chmod(filepath.Join(dst, "ro"), 0o755)
}

func TestExtractCancel(t *testing.T) {
	archive := tarOf(t, dir("base/"), file("base/a", strings.Repeat("a", 3*bufSize)), file("base/b", "b"))
	t.Run("before start", func(t *testing.T) {
		work := t.TempDir()
		before := snapshot(t, work)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Extract(ctx, bytes.NewReader(archive), filepath.Join(work, "out"), ExtractOptions{Base: "base"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v; want context.Canceled", err)
		}
		if d := diffSnap(before, snapshot(t, work)); d != "" {
			t.Errorf("changed:\n%s", d)
		}
	})
	t.Run("mid file", func(t *testing.T) {
		work := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		calls := 0
		_, err := Extract(ctx, bytes.NewReader(archive), filepath.Join(work, "out"), ExtractOptions{
			Base:     "base",
			Progress: func(Stats) { calls++; cancel() },
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v; want context.Canceled", err)
		}
		if calls == 0 {
			t.Error("Progress never called")
		}
		if entries, _ := os.ReadDir(work); len(entries) != 0 {
			t.Errorf("left behind: %v", entries)
		}
	})
}

func TestExtractProgressTotals(t *testing.T) {
	var last Stats
	st, err := Extract(context.Background(), bytes.NewReader(tarOf(t, dirItem...)), filepath.Join(t.TempDir(), "out"),
		ExtractOptions{Base: "base", Progress: func(s Stats) { last = s }})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{Files: 2, Dirs: 3, Bytes: 2}); st != want || last != want {
		t.Errorf("stats %+v, last progress %+v; want %+v", st, last, want)
	}
}

func TestExtractBadOptions(t *testing.T) {
	for _, base := range []string{"", "..", "a/b", `a\b`} {
		if _, err := Extract(context.Background(), bytes.NewReader(nil), t.TempDir(), ExtractOptions{Base: base}); err == nil {
			t.Errorf("Base %q accepted", base)
		}
	}
}
