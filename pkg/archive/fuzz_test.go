package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzAbs is where the seeds' absolute names point; the property checks nothing lands there.
var fuzzAbs = filepath.Join(os.TempDir(), "sbx-fuzz-abs")

// FuzzExtract feeds Extract hostile archives. The property: Extract either succeeds and
// every change is at or under dst, or fails and the filesystem is exactly as before, with
// no staging directory left behind. The layout byte picks the destination case, Base,
// Contents, caps and whether the work directory is guarded (walked by descriptor, as a
// project a sandbox may write to), and whether to repair header checksums after mutation so
// that mutated names, types and sizes reach Extract's rules instead of failing the checksum.
//
// Each run creates and removes a directory tree, so fuzz on a tmpfs, and bound the
// minimisation of new inputs, which otherwise takes up to a minute each on slow runs:
//
//	TMPDIR=/dev/shm go test -run='^$' -fuzz=FuzzExtract -fuzztime=60s \
//		-fuzzminimizetime=10x -parallel=1 ./pkg/archive
func FuzzExtract(f *testing.F) {
	for _, tc := range refusals() {
		f.Add(tc.build(f, fuzzAbs), uint8(0))
		f.Add(tc.build(f, fuzzAbs), uint8(1|2))
	}
	valid := [][]byte{
		tarOf(f, dirItem...),
		tarOf(f, fileRec...),
		tarOf(f, dir("./"), file("./top", "T"), dir("./sub/"), file("./sub/f", "F")),
		tarOf(f, file("./base/a/b/c", "C"), file("base/a/b/c", "D")),
		tarOf(f, ent{name: "base/", typ: tar.TypeDir, mode: 0o555}, ent{name: "base/f", typ: tar.TypeReg, mode: 0o6000, body: "x"}),
		tarOf(f, file("base/"+strings.Repeat("n", 150), "long name via PAX")),
	}
	for _, v := range valid {
		for _, layout := range []uint8{0, 2, 4, 8, 16, 1 | 32, 2 | 64, 8 | 64} {
			f.Add(v, layout)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, layout uint8) {
		if layout&1 != 0 {
			data = fixChecksums(data)
		}
		work := t.TempDir()
		mkTree(t, work, map[string]string{"outside/keep": "keep"})
		dst := filepath.Join(work, "dst")
		switch layout >> 1 % 3 {
		case 1:
			mkTree(t, work, map[string]string{"dst/old": "old", "dst/base/old": "old"})
		case 2:
			mkTree(t, work, map[string]string{"dst": "a file"})
		}
		// Small caps keep each run cheap (a sparse header can ask for a gigabyte of zeros);
		// the default caps have their own tests.
		opts := ExtractOptions{Base: "base", Contents: layout&8 != 0, MaxBytes: 1 << 20, MaxEntries: 1000}
		if layout&16 != 0 {
			opts.Base = "."
		}
		if layout&32 != 0 {
			opts.MaxBytes, opts.MaxEntries, opts.MaxDepth = 64, 4, 3
		}
		if layout&64 != 0 {
			opts.Guarded = []string{work}
		}
		before := snapshot(t, work)
		_, err := Extract(context.Background(), bytes.NewReader(data), dst, opts)
		after := snapshot(t, work)
		defer unlockTree(work)

		if err != nil {
			if d := diffSnap(before, after); d != "" {
				t.Fatalf("Extract failed (%v) but changed the filesystem:\n%s", err, d)
			}
		} else {
			for _, p := range changedPaths(before, after) {
				if p != "dst" && !strings.HasPrefix(p, "dst"+string(filepath.Separator)) {
					t.Fatalf("Extract succeeded but changed %s, outside dst:\n%s", p, diffSnap(before, after))
				}
			}
		}
		for p := range after {
			if strings.Contains(p, StagingPrefix) {
				t.Fatalf("staging leftover %s (err %v)", p, err)
			}
		}
		// Escapes that the work-directory snapshot cannot see.
		for d := filepath.Dir(work); ; d = filepath.Dir(d) {
			if _, err := os.Lstat(filepath.Join(d, "outside", "pwned")); err == nil {
				t.Fatalf("wrote %s", filepath.Join(d, "outside", "pwned"))
			}
			if d == filepath.Dir(d) {
				break
			}
		}
		if _, err := os.Lstat(fuzzAbs); err == nil {
			t.Fatalf("wrote under %s", fuzzAbs)
		}
	})
}

// unlockTree gives the owner full access to every directory under root, so that a tree
// extracted with 0o555 or 0o000 directories can be removed by a non-root test run.
func unlockTree(root string) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
}
