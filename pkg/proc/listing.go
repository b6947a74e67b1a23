package proc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Caps on what sbx reads back of a listing to parse. Inside the sandbox the scripts cut each
// field first, so a sandbox meets these only by tampering with their output.
const (
	// MaxList bounds the output of the process list: at most MaxMeta and a few numbers per
	// process, so some sixty processes with the longest commands.
	MaxList = 4 << 20
	// MaxMeta bounds a process's metadata line (its command line, user, directory,
	// timeout); a longer one is listed with its command unknown.
	MaxMeta = 64 << 10
	// MaxShellList bounds the output of the session list: a name, a path and a few numbers
	// per session.
	MaxShellList = 1 << 20
)

// A listing is a script that lists things in a sandbox, one line of tab-separated fields
// each, with the parser of its output.
type listing[T any] struct {
	script string
	name   string // "process list", for "the process list of sandbox ..."
	things string // "processes", for "listing the processes of sandbox ..."
	limit  int    // the most of its output sbx reads
	parse  func(string) ([]T, error)
}

// list runs l in sb with args, under the watchdog with a minute to finish, and parses what it
// lists. Exit code 3 says that what args asked for is not there: list returns notFound, or
// when that is nil the error of any other code.
func (l listing[T]) list(ctx context.Context, x Execer, sb *sandbox.Sandbox, notFound error, args ...string) ([]T, error) {
	out := &sandbox.LimitedBuffer{What: fmt.Sprintf("the %s of sandbox %q", l.name, sb.Name), Limit: l.limit}
	res, err := x.Exec(ctx, sb, sandbox.ExecOptions{Cmd: sb.Script(l.script, "sbx-script", args...), Stdout: out, Stderr: io.Discard, Timeout: time.Minute})
	switch {
	case err != nil:
		return nil, err
	case res.Canceled:
		return nil, ctx.Err()
	case res.ExitCode == 3 && notFound != nil:
		return nil, notFound
	case res.ExitCode != 0:
		return nil, errs.Failure(fmt.Errorf("listing the %s of sandbox %q: exit %d", l.things, sb.Name, res.ExitCode), "")
	}
	return l.parse(out.String())
}

// excerpt quotes the start of a line sbx could not parse, however long it is.
func excerpt(s string) string {
	const n = 120
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:n], len(s))
}

// epochTime parses bash's $EPOCHREALTIME: seconds, a point, microseconds.
func epochTime(s string) time.Time {
	secs, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || sec <= 0 || len(frac) > 9 {
		return time.Time{}
	}
	nsec, err := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(sec, nsec).UTC()
}

// randomHex is n random bytes in hex: process IDs, call IDs and status markers.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
