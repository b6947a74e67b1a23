package archive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ent is one entry of a test archive.
type ent struct {
	name string
	typ  byte
	body string
	mode int64
	link string
	pax  map[string]string
}

func file(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }

var testTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// tarOf builds an archive the way `tar -c` would lay it out.
func tarOf(tb testing.TB, ents ...ent) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link,
			Size: int64(len(e.body)), ModTime: testTime, Uid: 4242, Gid: 4242, PAXRecords: e.pax,
		}
		if e.pax != nil {
			hdr.Format = tar.FormatPAX
		}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatalf("writing header %q: %v", e.name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			tb.Fatalf("writing %q: %v", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// setSize rewrites the size field of the header block at off and fixes its checksum, to
// make an entry lie about its data.
func setSize(b []byte, off int, size int64) []byte {
	b = bytes.Clone(b)
	copy(b[off+124:off+136], fmt.Sprintf("%011o\x00", size))
	fixChecksum(b[off : off+blockSize])
	return b
}

func fixChecksum(blk []byte) {
	copy(blk[148:156], "        ")
	var sum int64
	for _, c := range blk {
		sum += int64(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
}

// fixChecksums walks b as a sequence of headers and data and recomputes every header's
// checksum, so that mutated archives get past the checksum and exercise the rules.
func fixChecksums(b []byte) []byte {
	b = bytes.Clone(b)
	for off := 0; off+blockSize <= len(b); {
		blk := b[off : off+blockSize]
		if bytes.Count(blk, []byte{0}) == blockSize {
			off += blockSize
			continue
		}
		fixChecksum(blk)
		size, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimRight(string(blk[124:136]), "\x00")), 8, 64)
		if size < 0 || size > int64(len(b)) {
			size = 0
		}
		off += blockSize + int(roundBlock(size))
	}
	return b
}

// snapshot records every path under root with its type, mode and content hash.
func snapshot(tb testing.TB, root string) map[string]string {
	tb.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err != nil { // an unreadable directory, as a non-root user sees 0o000
			snap[rel] = "unreadable: " + err.Error()
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			if b, err := os.ReadFile(p); err != nil {
				v += " unreadable"
			} else {
				h := sha256.Sum256(b)
				v += " " + hex.EncodeToString(h[:8])
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			v += " -> " + l
		}
		snap[rel] = v
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return snap
}

func diffSnap(before, after map[string]string) string {
	var out []string
	for _, p := range changedPaths(before, after) {
		out = append(out, fmt.Sprintf("%s: %q -> %q", p, before[p], after[p]))
	}
	return strings.Join(out, "\n")
}

// changedPaths lists the paths added, removed or changed between two snapshots.
func changedPaths(before, after map[string]string) []string {
	var out []string
	for k, v := range before {
		if w, ok := after[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// mkTree creates files ("path": "body") and directories ("path/": "") under root.
func mkTree(tb testing.TB, root string, tree map[string]string) {
	tb.Helper()
	for p, body := range tree {
		full := filepath.Join(root, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				tb.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

func readFile(tb testing.TB, p string) string {
	tb.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}
