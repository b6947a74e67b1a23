package egress

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// The decision log on disk is bounded like a sandbox's container log: the current file and
// one rotated file (path + ".1"), each at most max bytes. A sandbox looping requests to a
// denied host writes about 1 MB/s of decisions; without a bound that is the host's disk.
const (
	// DefaultLogFileMax is the size of each of the two files the proxy keeps.
	DefaultLogFileMax = 4 << 20
	// MinLogFileMax leaves room for a rotation line and the longest line after it.
	MinLogFileMax = 4 * MaxLogLine
)

// rotateEvent starts every file after a rotation; its Dropped is how many entries neither
// file holds any more, so a reader can say so.
const rotateEvent = "rotate"

type rotateLine struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Dropped int64     `json:"dropped"`
}

// LogFile is the proxy's decision log: an io.Writer taking one line a Write (as the Server
// writes them) that renames the file to path+".1" before a line would take it past max, so
// the two files never hold more than 2*max bytes. A write that cannot be made within the
// bound fails, and the server drops it.
type LogFile struct {
	mu      sync.Mutex
	path    string
	max     int64
	now     func() time.Time
	f       *os.File
	size    int64
	lines   int64 // entries in the current file
	rotated int64 // entries in path+".1"
	dropped int64 // entries in neither
}

// OpenLogFile opens (or creates) the decision log at path, each file at most limit bytes, carrying on the counts of a log a
// previous proxy left there.
func OpenLogFile(path string, limit int64, now func() time.Time) (*LogFile, error) {
	if limit < MinLogFileMax {
		return nil, fmt.Errorf("egress log: a file of at most %d bytes is too small (at least %d)", limit, MinLogFileMax)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the egress log: %w", err)
	}
	lf := &LogFile{path: path, max: limit, now: now, f: f}
	if st, err := f.Stat(); err == nil {
		lf.size = st.Size()
	}
	cur, _ := scanFile(path, limit, 0, nil)
	old, _ := scanFile(path+".1", limit, 0, nil)
	lf.lines, lf.rotated, lf.dropped = cur.entries, old.entries, max(cur.dropped, old.dropped)
	return lf, nil
}

// Write appends p, one line, rotating first when it would not fit.
func (lf *LogFile) Write(p []byte) (int, error) {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if int64(len(p)) > lf.max/2 {
		return 0, errors.New("egress log: line too long")
	}
	if lf.f == nil || lf.size+int64(len(p)) > lf.max {
		if err := lf.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := lf.f.Write(p)
	lf.size += int64(n)
	if n > 0 {
		lf.lines++
	}
	return n, err
}

// rotate replaces path+".1" with the current file and starts a new one with a rotate line.
// On failure the file stays closed and writes fail, so the bound holds whatever happens.
func (lf *LogFile) rotate() error {
	if lf.f != nil {
		lf.f.Close()
		lf.f = nil
		if err := os.Rename(lf.path, lf.path+".1"); err != nil {
			return fmt.Errorf("rotating the egress log: %w", err)
		}
		lf.dropped += lf.rotated
		lf.rotated, lf.lines = lf.lines, 0
	}
	f, err := os.OpenFile(lf.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("rotating the egress log: %w", err)
	}
	line, _ := json.Marshal(rotateLine{Time: lf.now().UTC(), Event: rotateEvent, Dropped: lf.dropped})
	n, err := f.Write(append(line, '\n'))
	if err != nil {
		f.Close()
		return fmt.Errorf("rotating the egress log: %w", err)
	}
	lf.f, lf.size = f, int64(n)
	return nil
}

// Close closes the current file.
func (lf *LogFile) Close() error {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.f == nil {
		return nil
	}
	err := lf.f.Close()
	lf.f = nil
	return err
}

// logScan is what one file of the log holds: how many entries (rotate lines are not
// entries), the last rotate line's count and how many lines are not entries.
type logScan struct {
	entries, dropped int64
	skipped          int
}

// scanFile reads the file at path (a missing file is empty) from offset, but no more than
// its last bound bytes, passing each entry to emit (nil: only count).
func scanFile(path string, bound, offset int64, emit func(Entry)) (logScan, error) {
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return logScan{}, nil
	}
	if err != nil {
		return logScan{}, err
	}
	defer fh.Close()
	return scanOpen(fh, bound, offset, emit)
}

func scanOpen(fh *os.File, bound, offset int64, emit func(Entry)) (logScan, error) {
	var s logScan
	p := newEntryParser(func(e Entry) {
		if e.Event == rotateEvent {
			s.dropped = e.Dropped
			return
		}
		s.entries++
		if emit != nil {
			emit(e)
		}
	})
	cut := false
	if st, err := fh.Stat(); err == nil && st.Size()-offset > bound {
		// More than the proxy writes: read only the end, from the first whole line.
		offset, cut = st.Size()-bound, true
		p.split.discarding = true
	}
	err := p.readAll(io.NewSectionReader(fh, offset, bound), make([]byte, 32<<10))
	s.skipped = p.split.skipped
	if cut && s.skipped > 0 {
		s.skipped-- // the cut first line is ours, not the file's
	}
	return s, err
}

// LogRead is what ReadLogFile found.
type LogRead struct {
	// Entries are the last entries of both files, oldest first; rotate lines are left out.
	Entries []Entry
	// Skipped counts lines that are not entries (too long, or not JSON).
	Skipped int
	// Dropped counts entries rotated out of both files: older than any file holds.
	Dropped int64
}

// ReadLogFile returns the last keep entries of the decision log at path and of its rotated
// file before it, reading at most 2*DefaultLogFileMax bytes of each. It fails with an error
// satisfying os.ErrNotExist when there is no log at all.
func ReadLogFile(path string, keep int) (LogRead, error) {
	if keep < 1 {
		return LogRead{}, errors.New("reading the egress log: max must be at least 1")
	}
	const bound = 2 * DefaultLogFileMax
	// The proxy may rotate between the two opens; then the rotated file opened is not the
	// one before the current file, so open both again.
	for try := 0; ; try++ {
		old, oldErr := os.Open(path + ".1")
		cur, err := os.Open(path)
		if err != nil {
			if oldErr == nil {
				old.Close()
			}
			return LogRead{}, err
		}
		if oldErr == nil && try < 3 && !samePath(old, path+".1") {
			old.Close()
			cur.Close()
			continue
		}
		last := ring{n: keep}
		var o logScan
		if oldErr == nil {
			o, err = scanOpen(old, bound, 0, last.add)
			old.Close()
		}
		var c logScan
		if err == nil {
			c, err = scanOpen(cur, bound, 0, last.add)
		}
		cur.Close()
		if err != nil {
			return LogRead{}, fmt.Errorf("reading the egress log: %w", err)
		}
		return LogRead{Entries: last.buf, Skipped: o.skipped + c.skipped, Dropped: max(o.dropped, c.dropped)}, nil
	}
}

// samePath reports whether path still names f's file.
func samePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// LogMark is a place in the decision log, for finding what the proxy wrote after it.
type LogMark struct {
	file   os.FileInfo
	offset int64
}

// MarkLog marks the end of the log at path now.
func MarkLog(path string) LogMark {
	st, err := os.Stat(path)
	if err != nil {
		return LogMark{}
	}
	return LogMark{file: st, offset: st.Size()}
}

// FindSince returns the first entry written after m that match accepts, reading at most
// 1 MiB of each file: the marked file from the mark on, wherever rotation moved it, then
// the current file.
func FindSince(path string, m LogMark, match func(Entry) bool) (Entry, bool) {
	const bound = 1 << 20
	var (
		found Entry
		ok    bool
	)
	emit := func(e Entry) {
		if !ok && match(e) {
			found, ok = e, true
		}
	}
	cur, err := os.Stat(path)
	if err != nil {
		return found, false
	}
	if m.file != nil && os.SameFile(m.file, cur) {
		_, _ = scanFile(path, bound, m.offset, emit)
		return found, ok
	}
	if old, err := os.Stat(path + ".1"); err == nil && m.file != nil && os.SameFile(m.file, old) {
		_, _ = scanFile(path+".1", bound, m.offset, emit)
	}
	if !ok {
		_, _ = scanFile(path, bound, 0, emit)
	}
	return found, ok
}
