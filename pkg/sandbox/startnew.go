package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// RelayPath is where a sandbox made with SpecInput.RelayBinary sees sbx's binary, read-only,
// to run a relay of its own (the browser's, pkg/browser).
const RelayPath = "/run/sbx-relay-bin/sbx"

// startLogLines is how much of a failed start's log NewStartError keeps.
const startLogLines = 20

// NewStartError is a sandbox StartNew made that did not come up; it has been removed.
type NewStartError struct {
	Name string
	Err  error
	// Tail is the end of its log, oldest line first.
	Tail []string
}

func (e *NewStartError) Error() string {
	return fmt.Sprintf("sandbox %q did not start: %v", e.Name, e.Err)
}
func (e *NewStartError) Unwrap() error { return e.Err }

// StartNew creates sandbox in.Name, which must not exist yet (the engine's conflict error
// when it does), and starts it under admission. ready then waits for what the image starts
// before sbx's agent (the browser's entrypoint starts it once Chromium is up), so the agent
// takes its socket, and the limits are checked, only after ready. Whatever fails after the
// create removes the sandbox, even when ctx was cancelled: the error is then ctx.Err(), or a
// *NewStartError with the end of the sandbox's log.
func (m *Manager) StartNew(ctx context.Context, in SpecInput, ready func(context.Context, *Sandbox) error) (*Sandbox, error) {
	sb, err := m.create(ctx, in)
	if err != nil {
		return nil, err
	}
	var as *agentStart
	defer func() { as.abandon() }()
	if err := m.admit(ctx, in.Config, in.Name, func(ctx context.Context) error {
		var err error
		as, err = m.startContainer(ctx, sb)
		return err
	}); err != nil {
		return nil, m.discardNew(ctx, sb, err)
	}
	sb.Status = "running"
	if err := ready(ctx, sb); err != nil {
		return nil, m.discardNew(ctx, sb, err)
	}
	if m.finishAgent(ctx, as) {
		if err := m.checkCgroupLimits(ctx, sb, as.host); err != nil {
			return nil, m.discardNew(ctx, sb, err)
		}
	}
	return sb, nil
}

// AgentBinaryProblem says why a sandbox of image cannot run this sbx's binary (as its agent
// or a relay), "" when it can.
func (m *Manager) AgentBinaryProblem(image string) string { return m.agentBinaryProblem(image) }

// discardNew removes a sandbox StartNew made that failed to come up, and returns cause as a
// *NewStartError with the end of its log.
func (m *Manager) discardNew(ctx context.Context, sb *Sandbox, cause error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	tail := m.logTail(cctx, sb.ID, startLogLines)
	if err := m.removeContainer(cctx, sb, true); err != nil {
		cause = fmt.Errorf("%w; removing it also failed: %v", cause, err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &NewStartError{Name: sb.Name, Err: cause, Tail: tail}
}

// logTail returns the last n lines of a container's log; it is only for explaining a
// failure, so an error leaves it empty.
func (m *Manager) logTail(ctx context.Context, id string, n int) []string {
	rc, err := m.Engine.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: fmt.Sprint(n)})
	if err != nil {
		return nil
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, _ = stdcopy.StdCopy(&buf, &buf, io.LimitReader(rc, 1<<20))
	var lines []string
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		if l := strings.TrimRight(sc.Text(), "\r"); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
