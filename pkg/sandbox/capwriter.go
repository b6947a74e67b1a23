package sandbox

import "io"

// OrDiscard is w, or io.Discard when w is nil: an output the caller left nil is dropped.
func OrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// CapWriter passes the first Limit bytes written to it on to W and counts the rest.
type CapWriter struct {
	W     io.Writer
	Limit int64
	n     int64
}

func (c *CapWriter) Write(p []byte) (int, error) {
	keep := p
	if room := c.Limit - c.n; int64(len(p)) > room {
		keep = p[:max(room, 0)]
	}
	c.n += int64(len(p))
	if len(keep) > 0 {
		if _, err := c.W.Write(keep); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Written counts every byte written, kept or not.
func (c *CapWriter) Written() int64 { return c.n }

// Truncated reports whether bytes were dropped.
func (c *CapWriter) Truncated() bool { return c.n > c.Limit }
