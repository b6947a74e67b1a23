package imagebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/sbx-sandbox/sbx/internal/lazyre"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// tailLines is how much of a failing step's output a failed build shows.
const tailLines = 20

// BuildError is a build the engine ran but that failed, with what is needed to show why.
type BuildError struct {
	Profile     string
	Tag         string
	Step, Steps int      // the failing step, 0 when it failed before the first
	Instruction string   // the failing step's Dockerfile instruction
	Message     string   // the engine's error
	Tail        []string // the last lines (at most 20) of the failing step's output
	network     string
	derived     bool // the build of a setup (derive.go), not of a bundled profile
}

var commandFailed = lazyre.New(`^The command '.*' returned a non-zero code: (\d+)$`)

func (e *BuildError) Error() string {
	msg := e.Message
	if m := commandFailed().FindStringSubmatch(msg); m != nil {
		msg = "exit status " + m[1]
	}
	if e.Step == 0 {
		return fmt.Sprintf("building image %s: %s", e.Tag, msg)
	}
	return fmt.Sprintf("building image %s failed at step %d/%d (%s): %s", e.Tag, e.Step, e.Steps, termtext.Ellipsis(e.Instruction, 60), msg)
}

// ExitCode makes a failed build an engine failure (125).
func (e *BuildError) ExitCode() int { return errs.CodeFailure }

// Hint suggests --network host when the step's output looks like the mirror was out of reach.
func (e *BuildError) Hint() string {
	if e.derived {
		if unreachable().MatchString(e.Message + "\n" + strings.Join(e.Tail, "\n")) {
			return "setup reaches the network only through sbx's egress proxy: add the destinations it needs to egress (@debian, @node and @python come with setup.apt, setup.npm and setup.pip)"
		}
		return "the failing step's last lines are above; fix the setup keys (sbx explain shows where they are set)"
	}
	if h := networkHint(e.Profile, e.network, e.Message+"\n"+strings.Join(e.Tail, "\n")); h != "" {
		return h
	}
	if len(e.Tail) == 0 {
		return fmt.Sprintf("sbx image build %s --progress plain shows the whole build log", e.Profile)
	}
	return fmt.Sprintf("the failing step's last lines are above; sbx image build %s --progress plain shows the whole log", e.Profile)
}

// Summary is the failing step and the end of its output, as printed when a build fails.
func (e *BuildError) Summary() string {
	var b strings.Builder
	if e.Step > 0 {
		fmt.Fprintf(&b, "step %d/%d failed: %s\n", e.Step, e.Steps, termtext.Ellipsis(e.Instruction, 160))
	}
	if len(e.Tail) > 0 {
		fmt.Fprintf(&b, "last %d lines of its output:\n", len(e.Tail))
		for _, l := range e.Tail {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	return b.String()
}

var unreachable = lazyre.New(`(?i)temporary failure resolving|could not resolve|failed to fetch|unable to connect|network is unreachable|connection timed out|no route to host`)

func networkHint(profile, network, text string) string {
	if network == "host" || !unreachable().MatchString(text) {
		return ""
	}
	return fmt.Sprintf("the build could not reach the Debian mirror; if this engine's bridge network has no internet access, build with: sbx image build %s --network host", profile)
}

// buildLog follows the classic builder's message stream: its steps, the output of the
// current one and the result, which it reports as events to p.
type buildLog struct {
	now       func() time.Time
	p         Progress
	partial   string // stream text after the last newline
	step      int
	steps     int
	instr     string
	stepStart time.Time
	cached    bool
	tail      []string
	id        string
	errMsg    string
}

var stepLine = lazyre.New(`^Step (\d+)/(\d+) : (.*)$`)

// eachMessage decodes the engine's stream of JSON messages (a build's, a pull's) and calls
// each with every message, as sent and decoded, until each returns false or the stream ends.
// Anything that is not a message is skipped; an error is the stream breaking.
func eachMessage(r io.Reader, each func(raw json.RawMessage, msg *jsonmessage.JSONMessage) bool) error {
	dec := json.NewDecoder(r)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var msg jsonmessage.JSONMessage
		if json.Unmarshal(raw, &msg) != nil {
			continue // not a message: nothing to show
		}
		if !each(raw, &msg) {
			return nil
		}
	}
}

// follow reads a build's message stream to its end and reports it to p.
func (m *Images) follow(ctx context.Context, r io.Reader, profile, tag string, p Progress) (BuildResult, error) {
	start := m.now()
	p.emit(BuildStarted{Profile: profile, Tag: tag})
	l := &buildLog{stepStart: start, now: m.now, p: p}
	err := eachMessage(r, func(raw json.RawMessage, msg *jsonmessage.JSONMessage) bool {
		ev := Message{Raw: raw, Stream: msg.Stream}
		if msg.Status != "" {
			ev.Pull = strings.TrimSpace(msg.ID + " " + msg.Status)
		}
		p.emit(ev)
		l.handle(msg)
		return l.errMsg == ""
	})
	if err != nil {
		p.emit(BuildFailed{})
		if ctx.Err() != nil {
			return BuildResult{}, ctx.Err()
		}
		return BuildResult{}, errs.Failure(fmt.Errorf("reading the build output of %s: %w", tag, err), "")
	}
	l.flush()
	if l.errMsg != "" {
		e := &BuildError{Profile: profile, Tag: tag, Step: l.step, Steps: l.steps, Instruction: l.instr,
			Message: l.errMsg, Tail: l.tail}
		p.emit(BuildFailed{Err: e})
		return BuildResult{}, e
	}
	res := BuildResult{Profile: profile, Tag: tag, ID: l.id, Elapsed: m.now().Sub(start)}
	l.stepDone()
	p.emit(BuildDone{Result: res})
	return res, nil
}

func (l *buildLog) handle(msg *jsonmessage.JSONMessage) {
	switch {
	case msg.Error != nil:
		l.errMsg = strings.TrimSpace(msg.Error.Message)
		if l.errMsg == "" {
			l.errMsg = fmt.Sprintf("the engine reported error code %d", msg.Error.Code)
		}
	case msg.Aux != nil:
		var aux struct{ ID string }
		if json.Unmarshal(*msg.Aux, &aux) == nil && aux.ID != "" {
			l.id = aux.ID
		}
	case msg.Stream != "":
		l.partial += msg.Stream
		for {
			i := strings.IndexByte(l.partial, '\n')
			if i < 0 {
				break
			}
			line := l.partial[:i]
			l.partial = l.partial[i+1:]
			l.handleLine(line)
		}
	case msg.Status != "":
		// Pull progress of a FROM image the engine lacks.
		l.handleLine(strings.TrimSpace(msg.ID + " " + msg.Status))
	}
}

func (l *buildLog) flush() {
	if l.partial != "" {
		line := l.partial
		l.partial = ""
		l.handleLine(line)
	}
}

// stepDone reports the end of the current step, if one has begun.
func (l *buildLog) stepDone() {
	if l.step > 0 {
		l.p.emit(StepDone{Step: l.step, Steps: l.steps, Instruction: l.instr, Cached: l.cached, Elapsed: l.now().Sub(l.stepStart)})
	}
}

// builderNote matches the builder's own notes, which follow a step's output on the same
// line when that output did not end with a newline.
var builderNote = lazyre.New(`(Removing intermediate container [0-9a-f]+| ---> (Running in [0-9a-f]+|Using cache|[0-9a-f]+))$`)

func (l *buildLog) handleLine(raw string) {
	line := termtext.Clean(raw)
	if loc := builderNote().FindStringIndex(line); loc != nil && loc[0] > 0 {
		l.handleLine(line[:loc[0]])
		line = line[loc[0]:]
	}
	if m := stepLine().FindStringSubmatch(line); m != nil {
		l.stepDone()
		l.step, _ = strconv.Atoi(m[1])
		l.steps, _ = strconv.Atoi(m[2])
		l.instr = collapseSpace(m[3])
		l.stepStart, l.cached, l.tail = l.now(), false, nil
		l.p.emit(StepStarted{Step: l.step, Steps: l.steps, Instruction: l.instr})
		return
	}
	switch {
	case strings.HasPrefix(line, " ---> Using cache"):
		l.cached = true
		return
	case strings.HasPrefix(line, " ---> "), strings.HasPrefix(line, "Removing intermediate container "),
		strings.HasPrefix(line, "Successfully tagged "):
		return
	case strings.HasPrefix(line, "Successfully built "):
		if l.id == "" {
			l.id = strings.TrimPrefix(line, "Successfully built ")
		}
		return
	case strings.TrimSpace(line) == "":
		return
	}
	l.tail = append(l.tail, line)
	if len(l.tail) > tailLines {
		l.tail = l.tail[len(l.tail)-tailLines:]
	}
	l.p.emit(Output{Line: line})
}

func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }
