package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Resolver looks names up; *net.Resolver is one. The proxy asks for absolute names (with a
// trailing dot), so no search domain is ever tried; tests map names with a fake.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens the proxy's outward connections; *net.Dialer is one. The proxy only ever
// dials an address it has checked, never a name.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config is what a Server needs. RulesFile, Resolver and Dialer are required.
type Config struct {
	// Sandbox names the sandbox in log lines and in the text of a refusal.
	Sandbox string
	// RulesFile is the File the rules come from; it is read by NewServer and again whenever
	// its size, modification time or inode changes, or on Reload.
	RulesFile string
	Resolver  Resolver
	Dialer    Dialer
	// Log receives the decision log, one JSON line a write (see Entry); nil discards it.
	// The server does not rotate it: a LogFile does.
	Log io.Writer
	// Now is the clock of log lines and durations; nil means time.Now.
	Now func() time.Time
	// Poll ticks when the rules file should be checked for a change; nil means every
	// DefaultPoll.
	Poll <-chan time.Time
	// MaxConns caps the sandbox's open connections; one more is answered 503 and closed.
	MaxConns int
	// MaxHeaderBytes caps a request's line and headers; more is answered 431.
	MaxHeaderBytes int
	// HeaderTimeout bounds reading a request's head once its first byte came.
	HeaderTimeout time.Duration
	// IdleTimeout ends a connection after this long without a byte in either direction,
	// including a kept-alive one waiting for its next request.
	IdleTimeout time.Duration
	// DialTimeout bounds resolving a name and connecting to it.
	DialTimeout time.Duration
}

// Defaults for the zero fields of Config.
const (
	DefaultPoll           = 500 * time.Millisecond
	DefaultMaxConns       = 256
	DefaultMaxHeaderBytes = 64 << 10
	DefaultHeaderTimeout  = 30 * time.Second
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultDialTimeout    = 15 * time.Second
)

// ErrServerClosed is what Serve returns after Close.
var ErrServerClosed = errors.New("egress proxy closed")

// Server is the filtering proxy: HTTP/1.1 forward proxying of plain HTTP and CONNECT tunnels,
// each decided by the current Policy and logged.
type Server struct {
	cfg    Config
	log    *logger
	policy atomic.Pointer[Policy]
	slots  chan struct{}

	ctx    context.Context // ends on Close: pending dials give up
	cancel context.CancelFunc

	reloadMu sync.Mutex
	fileInfo os.FileInfo // of the rules file last read, nil when it could not be stat'ed
	pollErr  string      // the last poll failure logged, so a missing file is logged once

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	polling   bool
	wg        sync.WaitGroup
}

// NewServer checks cfg and reads the rules file; a file that cannot be read or compiled is
// an error here (later, a bad file keeps the rules in effect).
func NewServer(cfg Config) (*Server, error) {
	switch {
	case cfg.RulesFile == "":
		return nil, errors.New("egress proxy: no rules file")
	case cfg.Resolver == nil || cfg.Dialer == nil:
		return nil, errors.New("egress proxy: a resolver and a dialer are required")
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	setDefault(&cfg.MaxConns, DefaultMaxConns)
	setDefault(&cfg.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&cfg.HeaderTimeout, DefaultHeaderTimeout)
	setDefault(&cfg.IdleTimeout, DefaultIdleTimeout)
	setDefault(&cfg.DialTimeout, DefaultDialTimeout)
	s := &Server{
		cfg:       cfg,
		log:       &logger{w: cfg.Log, sandbox: clip(cfg.Sandbox, maxLoggedHost)},
		slots:     make(chan struct{}, cfg.MaxConns),
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	info, _ := os.Stat(cfg.RulesFile)
	p, err := ReadFile(cfg.RulesFile)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	s.policy.Store(p)
	s.fileInfo = info
	return s, nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Policy returns the rules in effect.
func (s *Server) Policy() *Policy { return s.policy.Load() }

// Reload reads the rules file now. On an error the rules in effect stay; either way the
// outcome is logged.
func (s *Server) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	info, _ := os.Stat(s.cfg.RulesFile)
	return s.reloadLocked(info)
}

func (s *Server) reloadLocked(info os.FileInfo) error {
	s.fileInfo = info
	p, err := ReadFile(s.cfg.RulesFile)
	if err != nil {
		s.log.reload(s.cfg.Now(), 0, err)
		return err
	}
	s.policy.Store(p)
	s.log.reload(s.cfg.Now(), len(p.allow)+len(p.deny), nil)
	return nil
}

// poll reloads the rules file when it changed since it was last read. Writers replace it
// by rename (WriteFile), which changes the inode even when size and time stay the same.
func (s *Server) poll() {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	info, err := os.Stat(s.cfg.RulesFile)
	if err != nil {
		if msg := err.Error(); msg != s.pollErr {
			s.pollErr = msg
			s.log.reload(s.cfg.Now(), 0, err)
		}
		return
	}
	s.pollErr = ""
	if old := s.fileInfo; old != nil && os.SameFile(old, info) && old.Size() == info.Size() && old.ModTime().Equal(info.ModTime()) {
		return
	}
	_ = s.reloadLocked(info)
}

func (s *Server) pollLoop() {
	defer s.wg.Done()
	ticks := s.cfg.Poll
	if ticks == nil {
		t := time.NewTicker(DefaultPoll)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-ticks:
			s.poll()
		}
	}
}

// Serve accepts connections on l until Close, and returns ErrServerClosed then. The first
// call also starts watching the rules file. Serve may run on several listeners at once.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	if !s.polling {
		s.polling = true
		s.wg.Add(1)
		go s.pollLoop()
	}
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporaryAccept(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-s.ctx.Done():
				}
				continue
			}
			return err
		}
		backoff = 0
		select {
		case s.slots <- struct{}{}:
		default:
			s.refuseBusy(c)
			continue
		}
		if !s.track(c, true) {
			c.Close()
			<-s.slots
			return ErrServerClosed
		}
		go func() {
			defer s.endConn(c)
			s.serveConn(c)
		}()
	}
}

// isTemporaryAccept is true for the errors in acceptRetry.
func isTemporaryAccept(err error) bool {
	for _, e := range acceptRetry {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// refuseBusy answers a connection over MaxConns and closes it, without a goroutine: the
// answer fits any socket buffer, and the deadline bounds the accept loop's wait regardless.
func (s *Server) refuseBusy(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	text := fmt.Sprintf("sbx: the egress proxy of this sandbox has %d connections open, its limit; close some and retry\n", s.cfg.MaxConns)
	_ = writeTextResponse(c, 503, text)
	c.Close()
	s.log.request(Entry{Time: s.cfg.Now(), Reason: fmt.Sprintf("too many connections (%d)", s.cfg.MaxConns)})
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// track registers a connection Close must end and, with wait, one Close waits for (a
// sandbox's connection, served by its own goroutine); false once closed. Counting it under
// the lock keeps WaitGroup.Add from racing Close's Wait.
func (s *Server) track(c net.Conn, wait bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	if wait {
		s.wg.Add(1)
	}
	return true
}

func (s *Server) endConn(c net.Conn) {
	s.untrack(c)
	<-s.slots
	s.wg.Done()
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// Close stops the listeners, ends every connection and waits until each has written its
// log line.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cancel()
	var err error
	for l := range s.listeners {
		if e := l.Close(); e != nil && !errors.Is(e, net.ErrClosed) {
			err = e
		}
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// acceptRetry are the accept errors a listener outlives: out of descriptors or memory, or a
// connection reset before it was accepted.
var acceptRetry = []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED}
