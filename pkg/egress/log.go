package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Entry is one line of the decision log. A request's line has no Event; a rules-file reload
// writes a line with Event "reload" and Rules (how many rules are in effect) or Error (the
// file was refused and the previous rules stay); a LogFile starts each new file with Event
// "rotate" and Dropped.
type Entry struct {
	Time       time.Time `json:"time"`
	Sandbox    string    `json:"sandbox,omitempty"`
	Event      string    `json:"event,omitempty"`
	Method     string    `json:"method,omitempty"`
	Host       string    `json:"host,omitempty"`
	Port       int       `json:"port,omitempty"`
	Addr       string    `json:"addr,omitempty"`
	Allowed    bool      `json:"allowed"`
	Rule       string    `json:"rule,omitempty"`
	Preset     string    `json:"preset,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	BytesUp    int64     `json:"bytesUp"`
	BytesDown  int64     `json:"bytesDown"`
	DurationMs int64     `json:"durationMs"`
	Rules      int       `json:"rules,omitempty"`
	Error      string    `json:"error,omitempty"`
	// Dropped is on a "rotate" line, which starts each file after a rotation: how many
	// entries are in neither file of the log any more.
	Dropped int64 `json:"dropped,omitempty"`
}

// reloadLine is what a reload writes: the request fields would only be zeros.
type reloadLine struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox,omitempty"`
	Event   string    `json:"event"`
	Rules   int       `json:"rules,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// MaxLogLine bounds a line of the decision log. The proxy cuts the text it logs so that its
// lines stay far below it; a reader skips longer lines as not the proxy's.
const MaxLogLine = 16 << 10

// Caps on logged text, in bytes, before JSON escaping (which at most doubles them, since
// control characters are replaced first): a request's host, method and the reasons quoting
// them come from the sandbox.
const (
	maxLoggedHost   = 300
	maxLoggedMethod = 32
	maxLoggedText   = 1024
)

// logger serializes lines onto the caller's writer, one Write call a line, so that an
// O_APPEND file never interleaves two. It does not buffer: a slow writer slows the requests
// that log, and a failed write is dropped (the proxy keeps working without its log).
type logger struct {
	mu      sync.Mutex
	w       io.Writer
	buf     bytes.Buffer
	sandbox string
}

func (l *logger) write(v any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Reset()
	enc := json.NewEncoder(&l.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil || l.buf.Len() > MaxLogLine {
		return
	}
	_, _ = l.w.Write(l.buf.Bytes())
}

func (l *logger) request(e Entry) {
	e.Sandbox = l.sandbox
	e.Time = e.Time.UTC()
	e.Method = clip(e.Method, maxLoggedMethod)
	e.Host = clip(e.Host, maxLoggedHost)
	e.Reason = clip(e.Reason, maxLoggedText)
	l.write(e)
}

func (l *logger) reload(t time.Time, rules int, err error) {
	line := reloadLine{Time: t.UTC(), Sandbox: l.sandbox, Event: "reload", Rules: rules}
	if err != nil {
		line.Rules = 0
		line.Error = clip(err.Error()+"; keeping the previous rules", maxLoggedText)
	}
	l.write(line)
}

// clip makes untrusted text printable and short: control characters and invalid UTF-8
// become '?', and it is cut to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// lineSplitter cuts a byte stream into lines of at most max bytes. A longer line is
// dropped whole and counted; an unterminated tail is kept for the next write, since the
// writer may be in the middle of it.
type lineSplitter struct {
	max        int
	partial    []byte
	discarding bool
	skipped    int
}

func (s *lineSplitter) write(p []byte, line func([]byte)) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !s.discarding {
				s.partial = append(s.partial, p...)
			}
			if len(s.partial) > s.max {
				s.partial, s.discarding = nil, true
			}
			return
		}
		switch {
		case s.discarding || len(s.partial)+i > s.max:
			s.skipped++
		case len(s.partial) == 0:
			line(p[:i])
		default:
			line(append(s.partial, p[:i]...))
		}
		s.partial, s.discarding = s.partial[:0], false
		p = p[i+1:]
	}
}

// entryParser turns lines into entries, counting the ones that are not.
type entryParser struct {
	split lineSplitter
	emit  func(Entry)
}

func newEntryParser(emit func(Entry)) *entryParser {
	return &entryParser{split: lineSplitter{max: MaxLogLine}, emit: emit}
}

func (p *entryParser) write(b []byte) {
	p.split.write(b, func(line []byte) {
		if len(bytes.TrimSpace(line)) == 0 {
			return
		}
		var e Entry
		if json.Unmarshal(line, &e) != nil {
			p.split.skipped++
			return
		}
		p.emit(e)
	})
}

// readAll feeds r to the parser until EOF.
func (p *entryParser) readAll(r io.Reader, buf []byte) error {
	for {
		n, err := r.Read(buf)
		p.write(buf[:n])
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// ring keeps the last n entries.
type ring struct {
	n   int
	buf []Entry
}

func (r *ring) add(e Entry) {
	if len(r.buf) == r.n {
		copy(r.buf, r.buf[1:])
		r.buf = r.buf[:r.n-1]
	}
	r.buf = append(r.buf, e)
}

// ReadLog returns the last max entries of a decision log, oldest first, and how many lines
// it skipped (longer than MaxLogLine, or not an entry). An unterminated last line is left
// out: its writer may not have finished it.
func ReadLog(r io.Reader, max int) ([]Entry, int, error) {
	if max < 1 {
		return nil, 0, errors.New("reading the egress log: max must be at least 1")
	}
	last := ring{n: max}
	p := newEntryParser(last.add)
	if err := p.readAll(r, make([]byte, 32<<10)); err != nil {
		return nil, p.split.skipped, err
	}
	return last.buf, p.split.skipped, nil
}

// Follow calls emit with the last tail entries of the log at path and then with every entry
// appended to it, checking for more at each tick, until ctx ends or emit fails; it returns
// ctx.Err() or emit's error as they are. The tail includes the rotated file (path + ".1").
// It waits for a missing file to appear, finishes a file that was rotated away before it
// opens the new one, and starts again from the top of a file that shrank. A line is emitted once its newline is written.
func Follow(ctx context.Context, path string, tail int, ticks <-chan time.Time, emit func(Entry) error) error {
	if tail < 0 {
		return errors.New("following the egress log: tail must not be negative")
	}
	var (
		emitErr error
		f       *os.File
		offset  int64
		buf     = make([]byte, 32<<10)
		last    = ring{n: tail}
	)
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	send := func(e Entry) {
		if emitErr == nil {
			emitErr = emit(e)
		}
	}
	p := newEntryParser(last.add)
	if tail == 0 {
		p.emit = func(Entry) {}
	}
	for first := true; ; first = false {
		if f == nil {
			if fh, err := os.Open(path); err == nil {
				f, offset = fh, 0
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if f != nil {
			if first && tail > 0 {
				if err := tailRotated(path, f, &last); err != nil {
					return err
				}
			}
			if err := drain(f, p, &offset, buf); err != nil {
				return err
			}
			if first {
				for _, e := range last.buf {
					send(e)
				}
				p.emit = send
			}
			reopen, err := rotated(f, path, offset)
			if err != nil {
				return err
			}
			if reopen {
				if err := drain(f, p, &offset, buf); err != nil {
					return err
				}
				f.Close()
				f = nil
				p.split = lineSplitter{max: MaxLogLine}
				continue
			}
		} else if first {
			p.emit = send
		}
		if emitErr != nil {
			return emitErr
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticks:
		}
	}
}

// tailRotated puts the last entries of the file rotated before cur into last, so a tail
// right after a rotation still shows the decisions before it.
func tailRotated(path string, cur *os.File, last *ring) error {
	old, err := os.Open(path + ".1")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer old.Close()
	a, errA := old.Stat()
	b, errB := cur.Stat()
	if errA != nil || errB != nil || os.SameFile(a, b) {
		return nil // rotated since cur was opened: cur is that file
	}
	_, err = scanOpen(old, 2*DefaultLogFileMax, 0, last.add)
	return err
}

// drain reads f from offset to its end.
func drain(f *os.File, p *entryParser, offset *int64, buf []byte) error {
	for {
		n, err := f.ReadAt(buf, *offset)
		*offset += int64(n)
		p.write(buf[:n])
		if err == io.EOF || n == 0 && err == nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// rotated reports whether path no longer names f's file, or f shrank below what was read.
func rotated(f *os.File, path string, offset int64) (bool, error) {
	cur, err := f.Stat()
	if err != nil {
		return false, err
	}
	if cur.Size() < offset {
		return true, nil
	}
	now, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !os.SameFile(cur, now), nil
}
