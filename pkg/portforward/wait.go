package portforward

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Listening says whether something inside listens on port: whether dial's connection to it
// is made. It is the one rule for "is the server up?".
func Listening(ctx context.Context, dial Dialer, port int) (bool, error) {
	r, err := dial(ctx, port)
	if err == nil {
		if err = r.Connected(); err != nil {
			r.Close()
		}
	}
	if cf := ConnectFailure(nil); errors.As(err, &cf) && cf.Refused() {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.Close()
	return true, nil
}

// maxStatusLine bounds what WaitPort reads of an HTTP answer: the status line is enough.
const maxStatusLine = 4096

// answersHTTP says whether the server on port answers GET path with a status below 400,
// and when not, what it did.
func answersHTTP(ctx context.Context, dial Dialer, port int, path string) (bool, string, error) {
	r, err := dial(ctx, port)
	if err == nil {
		if err = r.Connected(); err != nil {
			r.Close()
		}
	}
	if cf := ConnectFailure(nil); errors.As(err, &cf) && cf.Refused() {
		return false, "nothing listened on it", nil
	}
	if err != nil {
		return false, "", err
	}
	defer r.Close()
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	noAnswer := fmt.Sprintf("GET %s got no HTTP answer", path)
	req := fmt.Sprintf("GET %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\nUser-Agent: sbx\r\nAccept: */*\r\n\r\n", path, port)
	if _, err := r.Write([]byte(req)); err != nil {
		return false, noAnswer, nil
	}
	line, err := bufio.NewReader(io.LimitReader(r, maxStatusLine)).ReadString('\n')
	if err != nil {
		return false, noAnswer, nil // not (yet) an HTTP server: a try that failed
	}
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return false, noAnswer, nil
	}
	code, err := strconv.Atoi(f[1])
	if err != nil || code < 100 || code > 999 {
		return false, noAnswer, nil
	}
	return code >= 200 && code < 400, fmt.Sprintf("GET %s answered %d", path, code), nil
}

// PollInterval paces the tries of WaitPort.
const PollInterval = 100 * time.Millisecond

// WaitPort waits up to timeout until something in sandbox name (dial's) listens on port and,
// with httpPath, answers GET httpPath with a 2xx or 3xx status. Running out of time is exit
// 124, with what the last try saw.
func WaitPort(ctx context.Context, dial Dialer, name string, port int, httpPath string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "nothing listened on it"
	answered := false // a try finished with an answer before the deadline
	for {
		var ok bool
		var err error
		if httpPath == "" {
			ok, err = Listening(wctx, dial, port)
		} else {
			var why string
			ok, why, err = answersHTTP(wctx, dial, port, httpPath)
			// A try the deadline cut short says less than one that finished before it.
			if why != "" && (wctx.Err() == nil || !answered) {
				last = why
				answered = answered || wctx.Err() == nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ok {
			return nil
		}
		// A try the deadline cut short ends the wait as running out of time does, also when
		// it failed (a dial after the deadline: "i/o timeout") before wctx's timer fired.
		if err != nil && wctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if wctx.Err() != nil || pause(wctx, PollInterval) != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errs.New(fmt.Errorf("port %d in sandbox %q was not ready within %s: %s", port, name, timeout, last), errs.CodeTimeout,
				"is the server started and listening on 127.0.0.1 or 0.0.0.0 inside? sbx ps and sbx logs ID show it; a longer wait gives it more time")
		}
	}
}

// pause waits d, or returns ctx's error when it ends first.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
