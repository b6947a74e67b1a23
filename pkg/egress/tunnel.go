package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// tunnel serves a CONNECT: after the decision and the connection, bytes flow both ways
// untouched until either side closes or both are idle for IdleTimeout.
func (s *Server) tunnel(c net.Conn, br *bufio.Reader, bw *bufio.Writer, r *request) {
	p, e, ok := s.decide(bw, r)
	if !ok {
		return
	}
	up := s.connect(bw, p, r, &e)
	if up == nil {
		return
	}
	defer s.untrack(up)
	_, err := io.WriteString(bw, "HTTP/1.1 200 Connection established\r\n\r\n")
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		e.Reason = "answering the CONNECT: " + err.Error()
		s.log.request(e)
		return
	}
	// What the client sent after its head (a TLS hello that did not wait) goes first.
	var early []byte
	if n := br.Buffered(); n > 0 {
		early, _ = br.Peek(n)
	}
	_ = c.SetDeadline(time.Time{})
	upN, downN, err := s.pipe(c, up, early)
	e.BytesUp, e.BytesDown = upN, downN
	e.DurationMs = s.cfg.Now().Sub(e.Time).Milliseconds()
	if err != nil {
		e.Reason = err.Error()
	}
	s.log.request(e)
}

// pipe copies both ways between the sandbox's connection and the destination's until both
// directions ended, one failed, or neither moved a byte for IdleTimeout.
func (s *Server) pipe(client, up net.Conn, early []byte) (upN, downN int64, err error) {
	w := watchIdle(s.cfg.IdleTimeout, func() { client.Close(); up.Close() })
	defer w.stop()
	if len(early) > 0 {
		n, werr := up.Write(early)
		upN += int64(n)
		if werr != nil {
			return upN, 0, w.explain(fmt.Errorf("tunnel: %w", werr))
		}
	}
	var upCopied, downCopied int64
	errc := make(chan error, 2)
	oneWay := func(dst, src net.Conn, count *int64) {
		n, err := copyIdle(dst, src, -1, w)
		*count = n
		if err == nil {
			closeWrite(dst) // the other direction may still carry the answer
		}
		errc <- err
	}
	go oneWay(up, client, &upCopied)
	go oneWay(client, up, &downCopied)
	for range 2 {
		if e := <-errc; e != nil {
			client.Close()
			up.Close()
			if err == nil {
				err = w.explain(fmt.Errorf("tunnel: %w", e))
			}
		}
	}
	return upN + upCopied, downCopied, err
}

// relay copies a response body of n bytes (to EOF when n < 0) from the destination to the
// sandbox, ending both connections when it stalls for IdleTimeout.
func (s *Server) relay(client, up net.Conn, n int64) (int64, error) {
	w := watchIdle(s.cfg.IdleTimeout, func() { client.Close(); up.Close() })
	defer w.stop()
	copied, err := copyIdle(client, up, n, w)
	return copied, w.explain(err)
}

// copyIdle copies from src to dst, n bytes or to EOF when n < 0. Between TCP connections it
// is a splice in the kernel, which reports nothing until it returns; so reads carry a
// deadline of a quarter of the idle time, after which the copy notes its progress with w
// and goes on. Only read deadlines are used: a read that times out has taken nothing,
// where a timed-out write (or splice) may drop bytes it had read. A stuck write is w's to
// end, by closing the connections.
func copyIdle(dst, src net.Conn, n int64, w *idleWatch) (int64, error) {
	_ = dst.SetWriteDeadline(time.Time{})
	var total int64
	for {
		_ = src.SetReadDeadline(time.Now().Add(w.idle / 4))
		var r io.Reader = src
		if n >= 0 {
			r = &io.LimitedReader{R: src, N: n - total}
		}
		k, err := io.Copy(dst, r)
		total += k
		if k > 0 {
			w.moved()
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue
		case err != nil:
			return total, err
		case n >= 0 && total < n:
			return total, io.ErrUnexpectedEOF
		}
		return total, nil
	}
}

// idleWatch ends a transfer in which no byte moved for idle: its timer re-arms itself from
// the last progress and calls onIdle once that is idle ago.
type idleWatch struct {
	idle  time.Duration
	start time.Time
	last  atomic.Int64 // time since start of the last progress
	fired atomic.Bool

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func watchIdle(idle time.Duration, onIdle func()) *idleWatch {
	w := &idleWatch{idle: idle, start: time.Now()}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(idle, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stopped {
			return
		}
		if quiet := time.Since(w.start) - time.Duration(w.last.Load()); quiet < idle {
			w.timer.Reset(idle - quiet)
			return
		}
		w.fired.Store(true)
		onIdle()
	})
	return w
}

func (w *idleWatch) moved() { w.last.Store(int64(time.Since(w.start))) }

func (w *idleWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
}

// explain replaces the error of a transfer the watch ended by the reason it ended.
func (w *idleWatch) explain(err error) error {
	if err != nil && w.fired.Load() {
		return fmt.Errorf("closed after %s without traffic", w.idle)
	}
	return err
}

// closeWrite passes an end of stream on, keeping the other direction open.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}
