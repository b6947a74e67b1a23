package overlay

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Patch writes changes as a git-style unified diff that git apply accepts: full blob ids on
// the index lines, exact renames as renames, binary files as literal GIT binary patches.
// Directories and permission bits other than the owner's x bit have no place in a patch;
// sbx diff --json lists them. Names are quoted as git quotes them, so no byte of a name the
// sandbox chose reaches a terminal raw.
func (l Layers) Patch(w io.Writer, changes []Change) error {
	up, low, err := l.roots()
	if err != nil {
		return err
	}
	defer unix.Close(up)
	defer unix.Close(low)
	bw := bufio.NewWriter(w)
	for _, c := range changes {
		if c.Kind == KindDir {
			continue
		}
		if err := writeOne(bw, up, low, c); err != nil {
			return fmt.Errorf("%s: %w", c.Path, err)
		}
	}
	return bw.Flush()
}

// Stat is a change's line count for sbx diff --stat; Binary files count no lines.
type Stat struct {
	Added, Deleted int
}

// Stats counts the lines each change adds and deletes, in the order of changes.
func (l Layers) Stats(changes []Change) ([]Stat, error) {
	up, low, err := l.roots()
	if err != nil {
		return nil, err
	}
	defer unix.Close(up)
	defer unix.Close(low)
	out := make([]Stat, len(changes))
	for i, c := range changes {
		if c.Kind == KindDir || c.Binary || c.Status == ModeOnly {
			continue
		}
		a, b, err := sides(up, low, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Path, err)
		}
		for _, op := range lineDiff(splitLines(a), splitLines(b)) {
			switch op.kind {
			case '+':
				out[i].Added++
			case '-':
				out[i].Deleted++
			}
		}
	}
	return out, nil
}

func gitMode(kind string, perm uint32) string {
	switch {
	case kind == KindSymlink:
		return "120000"
	case perm&0o100 != 0:
		return "100755"
	}
	return "100644"
}

// Quote quotes a path as git does when it holds a control character, a quote, a backslash
// or a byte outside ASCII; other paths come back as they are.
func Quote(p string) string {
	plain := true
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, `\%03o`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

func prefixed(prefix, p string) string {
	q := Quote(p)
	if q[0] == '"' {
		return `"` + prefix + q[1:]
	}
	return prefix + q
}

const nullID = "0000000000000000000000000000000000000000"

// sides reads the old and new content of a non-binary change (text is at most textLimit).
func sides(up, low int, c Change) (old, cur []byte, err error) {
	if o := c.oldSide(); o != "" {
		if old, err = readSide(low, false, o, c.Kind, textLimit); err != nil {
			return nil, nil, err
		}
	}
	if c.Status != Deleted {
		if cur, err = readSide(up, true, c.Path, c.Kind, textLimit); err != nil {
			return nil, nil, err
		}
	}
	return old, cur, nil
}

// readSide reads the file or link target rel under root, at most limit bytes.
func readSide(root int, upper bool, rel, kind string, limit int64) ([]byte, error) {
	if kind == KindSymlink {
		dir, base := split(rel)
		d, err := openDir(root, dir)
		if err != nil {
			return nil, err
		}
		defer unix.Close(d)
		t, err := readLink(d, base)
		return []byte(t), err
	}
	f, err := openIn(root, upper, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("larger than %d bytes", limit)
	}
	return data, err
}

// blobID is git's object id of a blob: SHA-1 of a header and the content, streamed.
func blobID(root int, upper bool, rel, kind string) (string, int64, error) {
	h := sha1.New()
	if kind == KindSymlink {
		t, err := readSide(root, upper, rel, kind, 4096)
		if err != nil {
			return "", 0, err
		}
		fmt.Fprintf(h, "blob %d\x00%s", len(t), t)
		return fmt.Sprintf("%x", h.Sum(nil)), int64(len(t)), nil
	}
	f, err := openIn(root, upper, rel)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	fmt.Fprintf(h, "blob %d\x00", fi.Size())
	n, err := io.Copy(h, io.LimitReader(f, fi.Size()))
	if err == nil && n != fi.Size() {
		err = fmt.Errorf("changed while read")
	}
	return fmt.Sprintf("%x", h.Sum(nil)), n, err
}

// MaxPatchSize is the largest file whose content the patch carries.
const MaxPatchSize = 256 << 20

func writeOne(w *bufio.Writer, up, low int, c Change) error {
	oldName, newName := c.Path, c.Path
	if c.Status == Renamed {
		oldName = c.OldPath
	}
	fmt.Fprintf(w, "diff --git %s %s\n", prefixed("a/", oldName), prefixed("b/", newName))
	oldMode, newMode := gitMode(c.Kind, c.oldPerm), gitMode(c.Kind, c.newPerm)
	switch c.Status {
	case Added:
		fmt.Fprintf(w, "new file mode %s\n", newMode)
	case Deleted:
		fmt.Fprintf(w, "deleted file mode %s\n", oldMode)
	default:
		if oldMode != newMode {
			fmt.Fprintf(w, "old mode %s\nnew mode %s\n", oldMode, newMode)
		}
	}
	if c.Status == Renamed {
		fmt.Fprintf(w, "similarity index 100%%\nrename from %s\nrename to %s\n", Quote(c.OldPath), Quote(c.Path))
		return nil
	}
	if c.Status == ModeOnly {
		return nil
	}
	if c.Kind == KindFile && c.Size > MaxPatchSize {
		// Its content would make the patch as large as the file (a sparse file the sandbox
		// made can claim terabytes): named, never streamed; sbx apply writes its extents.
		fmt.Fprintf(w, "Binary files %s and %s differ\n", prefixed("a/", oldName), prefixed("b/", newName))
		return nil
	}
	oldID, newID := nullID, nullID
	var err error
	var newSize int64
	if c.Status != Added {
		if oldID, _, err = blobID(low, false, c.Path, c.Kind); err != nil {
			return err
		}
	}
	if c.Status != Deleted {
		if newID, newSize, err = blobID(up, true, c.Path, c.Kind); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "index %s..%s", oldID, newID)
	if c.Status == Modified && oldMode == newMode {
		fmt.Fprintf(w, " %s", oldMode)
	}
	w.WriteString("\n")
	if c.Binary {
		w.WriteString("GIT binary patch\n")
		if c.Status == Deleted {
			return literal(w, nil, 0)
		}
		f, err := openIn(up, true, c.Path)
		if err != nil {
			return err
		}
		defer f.Close()
		return literal(w, io.LimitReader(f, newSize), newSize)
	}
	a, b, err := sides(up, low, c)
	if err != nil {
		return err
	}
	from, to := prefixed("a/", c.Path), prefixed("b/", c.Path)
	if c.Status == Added {
		from = "/dev/null"
	}
	if c.Status == Deleted {
		to = "/dev/null"
	}
	fmt.Fprintf(w, "--- %s\n+++ %s\n", from, to)
	writeHunks(w, splitLines(a), splitLines(b))
	return nil
}

// literal writes a "literal" binary hunk: the zlib-deflated content in git's base85 lines,
// streamed, then the blank line that ends the hunk.
func literal(w *bufio.Writer, r io.Reader, size int64) error {
	fmt.Fprintf(w, "literal %d\n", size)
	lw := &base85Lines{w: w}
	zw := zlib.NewWriter(lw)
	if r != nil {
		if n, err := io.Copy(zw, r); err != nil {
			return err
		} else if n != size {
			return fmt.Errorf("changed while read")
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	lw.flush()
	w.WriteString("\n")
	return nil
}

const base85Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// base85Lines writes what it is given as git's base85 lines of up to 52 bytes each.
type base85Lines struct {
	w   *bufio.Writer
	buf []byte
}

func (b *base85Lines) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	for len(b.buf) >= 52 {
		b.line(b.buf[:52])
		b.buf = b.buf[52:]
	}
	return len(p), nil
}

func (b *base85Lines) flush() {
	if len(b.buf) > 0 {
		b.line(b.buf)
		b.buf = nil
	}
}

func (b *base85Lines) line(data []byte) {
	n := len(data)
	if n <= 26 {
		b.w.WriteByte(byte('A' + n - 1))
	} else {
		b.w.WriteByte(byte('a' + n - 27))
	}
	for i := 0; i < n; i += 4 {
		var v uint32
		for j := 0; j < 4; j++ {
			v <<= 8
			if i+j < n {
				v |= uint32(data[i+j])
			}
		}
		var out [5]byte
		for j := 4; j >= 0; j-- {
			out[j] = base85Alphabet[v%85]
			v /= 85
		}
		b.w.Write(out[:])
	}
	b.w.WriteByte('\n')
}

// splitLines splits text into lines that keep their newline; the last may lack one.
func splitLines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, string(b))
			break
		}
		out = append(out, string(b[:i+1]))
		b = b[i+1:]
	}
	return out
}

type diffOp struct {
	kind byte // ' ', '-', '+'
	line string
}

// maxEdits bounds the Myers search; past it the files are shown as replaced whole, which
// is as correct a patch, only longer.
const maxEdits = 1000

// lineDiff is Myers' O(ND) difference of a and b as a list of operations.
func lineDiff(a, b []string) []diffOp {
	n, m := len(a), len(b)
	limit := min(n+m, maxEdits)
	off := limit + 1
	v := make([]int, 2*limit+3)
	var trace [][]int
	found := false
	for d := 0; d <= limit && !found; d++ {
		snap := make([]int, len(v))
		copy(snap, v)
		trace = append(trace, snap)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = true
				break
			}
		}
	}
	if !found {
		ops := make([]diffOp, 0, n+m)
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	// Walk back through the saved frontiers.
	var ops []diffOp
	x, y := n, m
	for d := len(trace) - 1; d >= 0; d-- {
		vd := trace[d]
		k := x - y
		var prevK int
		if k == -d || (k != d && vd[off+k-1] < vd[off+k+1]) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := vd[off+prevK]
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x, y = x-1, y-1
			ops = append(ops, diffOp{' ', a[x]})
		}
		if d > 0 {
			if x == prevX {
				y--
				ops = append(ops, diffOp{'+', b[y]})
			} else {
				x--
				ops = append(ops, diffOp{'-', a[x]})
			}
		}
		x, y = prevX, prevY
	}
	for i, j := 0, len(ops)-1; i < j; i, j = i+1, j-1 {
		ops[i], ops[j] = ops[j], ops[i]
	}
	return ops
}

// writeHunks writes the difference of a and b as unified hunks with three lines of context.
func writeHunks(w *bufio.Writer, a, b []string) {
	ops := lineDiff(a, b)
	const ctx = 3
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-ctx, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, run)
				break
			}
			end = run
		}
		oldStart, newStart := 1, 1
		for _, op := range ops[:start] {
			if op.kind != '+' {
				oldStart++
			}
			if op.kind != '-' {
				newStart++
			}
		}
		oldLen, newLen := 0, 0
		for _, op := range ops[start:end] {
			if op.kind != '+' {
				oldLen++
			}
			if op.kind != '-' {
				newLen++
			}
		}
		if oldLen == 0 {
			oldStart--
		}
		if newLen == 0 {
			newStart--
		}
		fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(oldStart, oldLen), hunkRange(newStart, newLen))
		for _, op := range ops[start:end] {
			w.WriteByte(op.kind)
			w.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				w.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
}

func hunkRange(start, n int) string {
	if n == 1 {
		return strconv.Itoa(start)
	}
	return strconv.Itoa(start) + "," + strconv.Itoa(n)
}
