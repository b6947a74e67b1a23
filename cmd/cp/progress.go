package cp

import (
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/archive"
)

// progressDelay is how long a copy runs before its progress bar appears, so quick copies
// print nothing but their summary.
const progressDelay = time.Second

// progressBar redraws one line on stderr (a terminal) with bytes and files copied, and a bar
// when the totals are known. A nil *progressBar does nothing.
type progressBar struct {
	out   io.Writer
	now   func() time.Time
	label string
	start time.Time

	mu         sync.Mutex
	stats      archive.Stats
	totalBytes int64
	totalFiles int
	shown      bool
	finished   bool

	stop chan struct{}
	done chan struct{}
}

func startProgress(out io.Writer, now func() time.Time, label string) *progressBar {
	p := &progressBar{out: out, now: now, label: label, start: now(), stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *progressBar) run() {
	defer close(p.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if now := p.now(); now.Sub(p.start) >= progressDelay {
				fmt.Fprint(p.out, "\r\x1b[K"+p.line(now))
				p.shown = true
			}
			p.mu.Unlock()
		}
	}
}

// update records running totals; it is called on the copying goroutine for every chunk.
func (p *progressBar) update(s archive.Stats) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stats = s
	p.mu.Unlock()
}

// setTotals records what the whole copy will move, when known.
func (p *progressBar) setTotals(bytes int64, files int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.totalBytes, p.totalFiles = bytes, files
	p.mu.Unlock()
}

// finish stops redrawing and clears the line; calling it again does nothing.
func (p *progressBar) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	p.finished = true
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	if p.shown {
		fmt.Fprint(p.out, "\r\x1b[K")
	}
}

const barWidth = 20

// line renders the progress at now; the caller holds p.mu.
func (p *progressBar) line(now time.Time) string {
	s := p.stats
	var b strings.Builder
	b.WriteString(shorten(p.label, 40))
	if p.totalBytes > 0 {
		frac := min(float64(s.Bytes)/float64(p.totalBytes), 1)
		n := int(frac * barWidth)
		fmt.Fprintf(&b, "  [%s%s] %3.0f%%  %s/%s", strings.Repeat("#", n), strings.Repeat("-", barWidth-n), frac*100,
			humanBytes(s.Bytes), humanBytes(p.totalBytes))
	} else {
		fmt.Fprintf(&b, "  %s", humanBytes(s.Bytes))
	}
	if p.totalFiles > 0 {
		fmt.Fprintf(&b, "  %d/%d files", s.Files, p.totalFiles)
	} else {
		fmt.Fprintf(&b, "  %d files", s.Files)
	}
	if secs := now.Sub(p.start).Seconds(); secs > 0 {
		fmt.Fprintf(&b, "  %s/s", humanBytes(int64(float64(s.Bytes)/secs)))
	}
	return b.String()
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}

// humanBytes formats a byte count in binary units: 0 B, 512 B, 1.5 KiB, 12.3 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// hostTotals counts the regular files under src and their bytes, for the progress bar. It
// follows no symlink but src itself (with follow), as the copy does.
func hostTotals(src string, follow bool) (int64, int) {
	if follow {
		if real, err := filepath.EvalSymlinks(src); err == nil {
			src = real
		}
	}
	var bytes int64
	var files int
	_ = filepath.WalkDir(src, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			bytes += fi.Size()
			files++
		}
		return nil
	})
	return bytes, files
}
