package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/docker/docker/pkg/jsonmessage"
	"golang.org/x/term"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Progress modes of an image build.
const (
	ProgressAuto  = "auto"  // a live view on a terminal, one line per step elsewhere
	ProgressPlain = "plain" // the build log as the engine streams it
	ProgressJSON  = "json"  // the engine's JSON messages, one per line
)

// ProgressModes lists the valid Progress.Mode values.
var ProgressModes = []string{ProgressAuto, ProgressPlain, ProgressJSON}

// tailLines is how much of a failing step's output a failed build shows.
const tailLines = 20

// Progress says where and how a build reports progress. A nil *Progress shows nothing.
type Progress struct {
	Out   io.Writer // usually stderr
	Mode  string    // ProgressAuto (also when ""), ProgressPlain or ProgressJSON
	TTY   bool      // Out is a terminal, so auto mode redraws a live view
	Quiet bool      // show nothing but a failed build's summary
	// Width is the terminal's width in columns; 0 asks the terminal behind Out, else 80.
	Width int
	Now   func() time.Time // nil means time.Now
}

func (p *Progress) now() time.Time {
	if p == nil || p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *Progress) mode() string {
	switch {
	case p == nil || p.Out == nil:
		return ""
	case p.Quiet:
		return "quiet"
	case p.Mode == "":
		return ProgressAuto
	}
	return p.Mode
}

// notef prints a progress note or warning, which the JSON stream and quiet runs leave out.
func (p *Progress) notef(format string, a ...any) {
	if m := p.mode(); m == ProgressAuto || m == ProgressPlain {
		fmt.Fprintf(p.Out, format, a...)
	}
}

func (p *Progress) width() int {
	if p.Width > 0 {
		return p.Width
	}
	if f, ok := p.Out.(interface{ Fd() uintptr }); ok {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			return w
		}
	}
	return 80
}

// BuildError is a build the engine ran but that failed, with what is needed to show why.
type BuildError struct {
	Profile     string
	Tag         string
	Step, Steps int      // the failing step, 0 when it failed before the first
	Instruction string   // the failing step's Dockerfile instruction
	Message     string   // the engine's error
	Tail        []string // the last lines (at most 20) of the failing step's output
	network     string
}

var commandFailed = regexp.MustCompile(`^The command '.*' returned a non-zero code: (\d+)$`)

func (e *BuildError) Error() string {
	msg := e.Message
	if m := commandFailed.FindStringSubmatch(msg); m != nil {
		msg = "exit status " + m[1]
	}
	if e.Step == 0 {
		return fmt.Sprintf("building image %s: %s", e.Tag, msg)
	}
	return fmt.Sprintf("building image %s failed at step %d/%d (%s): %s", e.Tag, e.Step, e.Steps, ellipsis(e.Instruction, 60), msg)
}

// ExitCode makes a failed build an engine failure (125).
func (e *BuildError) ExitCode() int { return errs.CodeFailure }

// Hint suggests --network host when the step's output looks like the mirror was out of reach.
func (e *BuildError) Hint() string {
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
		fmt.Fprintf(&b, "step %d/%d failed: %s\n", e.Step, e.Steps, ellipsis(e.Instruction, 160))
	}
	if len(e.Tail) > 0 {
		fmt.Fprintf(&b, "last %d lines of its output:\n", len(e.Tail))
		for _, l := range e.Tail {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	return b.String()
}

var unreachable = regexp.MustCompile(`(?i)temporary failure resolving|could not resolve|failed to fetch|unable to connect|network is unreachable|connection timed out|no route to host`)

func networkHint(profile, network, text string) string {
	if network == "host" || !unreachable.MatchString(text) {
		return ""
	}
	return fmt.Sprintf("the build could not reach the Debian mirror; if this engine's bridge network has no internet access, build with: sbx image build %s --network host", profile)
}

// buildLog follows the classic builder's message stream: its steps, the output of the
// current one and the result.
type buildLog struct {
	partial   string // stream text after the last newline
	step      int
	steps     int
	instr     string
	stepStart time.Time
	cached    bool
	tail      []string
	last      string
	id        string
	errMsg    string
}

var stepLine = regexp.MustCompile(`^Step (\d+)/(\d+) : (.*)$`)

// buildView shows a build; one per progress mode.
type buildView interface {
	message(raw []byte, msg *jsonmessage.JSONMessage) // every message, before it is parsed
	step(l *buildLog, prev int, prevCached bool, prevElapsed time.Duration)
	line(l *buildLog, line string)
	done(l *buildLog, res BuildResult)
	failed(l *buildLog, e *BuildError)
}

// follow reads a build's message stream to its end and reports it through p.
func (p *Progress) follow(ctx context.Context, r io.Reader, profile, tag string) (BuildResult, error) {
	start := p.now()
	view := p.view(profile, tag, start)
	l := &buildLog{stepStart: start}
	dec := json.NewDecoder(r)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				view.failed(l, nil)
				return BuildResult{}, ctx.Err()
			}
			view.failed(l, nil)
			return BuildResult{}, errs.Failure(fmt.Errorf("reading the build output of %s: %w", tag, err), "")
		}
		var msg jsonmessage.JSONMessage
		if err := json.Unmarshal(raw, &msg); err != nil {
			continue // not a message: nothing to show but the raw line in JSON mode
		}
		view.message(raw, &msg)
		l.handle(&msg, p, view)
		if l.errMsg != "" {
			break
		}
	}
	l.flush(p, view)
	if l.errMsg != "" {
		e := &BuildError{Profile: profile, Tag: tag, Step: l.step, Steps: l.steps, Instruction: l.instr,
			Message: l.errMsg, Tail: l.tail}
		view.failed(l, e)
		return BuildResult{}, e
	}
	res := BuildResult{Profile: profile, Tag: tag, ID: l.id, Elapsed: p.now().Sub(start)}
	view.done(l, res)
	return res, nil
}

func (l *buildLog) handle(msg *jsonmessage.JSONMessage, p *Progress, view buildView) {
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
			l.handleLine(line, p, view)
		}
	case msg.Status != "":
		// Pull progress of a FROM image the engine lacks.
		l.handleLine(strings.TrimSpace(msg.ID+" "+msg.Status), p, view)
	}
}

func (l *buildLog) flush(p *Progress, view buildView) {
	if l.partial != "" {
		line := l.partial
		l.partial = ""
		l.handleLine(line, p, view)
	}
}

// builderNote matches the builder's own notes, which follow a step's output on the same
// line when that output did not end with a newline.
var builderNote = regexp.MustCompile(`(Removing intermediate container [0-9a-f]+| ---> (Running in [0-9a-f]+|Using cache|[0-9a-f]+))$`)

func (l *buildLog) handleLine(raw string, p *Progress, view buildView) {
	line := cleanLine(raw)
	if loc := builderNote.FindStringIndex(line); loc != nil && loc[0] > 0 {
		l.handleLine(line[:loc[0]], p, view)
		line = line[loc[0]:]
	}
	if m := stepLine.FindStringSubmatch(line); m != nil {
		prev, prevCached, prevElapsed := l.step, l.cached, p.now().Sub(l.stepStart)
		l.step, _ = strconv.Atoi(m[1])
		l.steps, _ = strconv.Atoi(m[2])
		l.instr = collapseSpace(m[3])
		l.stepStart, l.cached, l.tail, l.last = p.now(), false, nil, ""
		view.step(l, prev, prevCached, prevElapsed)
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
	l.last = line
	view.line(l, line)
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]`)

// cleanLine keeps what a terminal would show of a log line: the text after its last
// carriage return, without escape sequences or other control characters.
func cleanLine(s string) string {
	s = strings.TrimRight(s, "\r")
	if i := strings.LastIndexByte(s, '\r'); i >= 0 {
		s = s[i+1:]
	}
	s = ansiEscape.ReplaceAllString(s, "")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case r < 0x20 || r == 0x7f:
			return -1
		}
		return r
	}, s)
}

func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

func ellipsis(s string, n int) string {
	if n <= 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func fmtElapsed(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

func (p *Progress) view(profile, tag string, start time.Time) buildView {
	switch m := p.mode(); m {
	case "":
		return silentView{}
	case "quiet":
		return &summaryView{out: p.Out}
	case ProgressJSON:
		return &jsonView{out: p.Out}
	case ProgressPlain:
		return &plainView{out: p.Out}
	default:
		fmt.Fprintf(p.Out, "building %s (profile %s)\n", tag, profile)
		if p.TTY {
			v := &liveView{p: p, start: start, stop: make(chan struct{}), stopped: make(chan struct{})}
			go v.tick()
			return v
		}
		return &stepView{out: p.Out, now: p.now, start: start}
	}
}

type silentView struct{}

func (silentView) message([]byte, *jsonmessage.JSONMessage) {}
func (silentView) step(*buildLog, int, bool, time.Duration) {}
func (silentView) line(*buildLog, string)                   {}
func (silentView) done(*buildLog, BuildResult)              {}
func (silentView) failed(*buildLog, *BuildError)            {}

// summaryView shows nothing but a failure's summary.
type summaryView struct {
	silentView
	out io.Writer
}

func (v *summaryView) failed(_ *buildLog, e *BuildError) {
	if e != nil {
		fmt.Fprint(v.out, e.Summary())
	}
}

type jsonView struct {
	silentView
	out io.Writer
}

func (v *jsonView) message(raw []byte, _ *jsonmessage.JSONMessage) {
	fmt.Fprintf(v.out, "%s\n", raw)
}

// plainView streams the log as the engine sends it.
type plainView struct {
	silentView
	out io.Writer
}

func (v *plainView) message(_ []byte, msg *jsonmessage.JSONMessage) {
	switch {
	case msg.Stream != "":
		fmt.Fprint(v.out, msg.Stream)
	case msg.Status != "":
		fmt.Fprintln(v.out, strings.TrimSpace(msg.ID+" "+msg.Status))
	}
}

// stepView prints a line as each step starts, for logs that are not a terminal.
type stepView struct {
	out   io.Writer
	now   func() time.Time
	start time.Time
}

func (v *stepView) message([]byte, *jsonmessage.JSONMessage) {}
func (v *stepView) line(*buildLog, string)                   {}

func (v *stepView) step(l *buildLog, _ int, _ bool, _ time.Duration) {
	fmt.Fprintf(v.out, "[%d/%d] %s\n", l.step, l.steps, ellipsis(l.instr, 100))
}

func (v *stepView) done(_ *buildLog, res BuildResult) {
	fmt.Fprintf(v.out, "built %s (%s) in %s\n", res.Tag, shortID(res.ID), fmtElapsed(res.Elapsed))
}

func (v *stepView) failed(_ *buildLog, e *BuildError) {
	if e != nil {
		fmt.Fprint(v.out, e.Summary())
	}
}

// liveView redraws the bottom of a terminal: the current step with its elapsed time and,
// once there is one, the step's last output line. Finished steps scroll up above them.
type liveView struct {
	p     *Progress
	start time.Time

	mu      sync.Mutex
	l       *buildLog
	drawn   int // lines of the live area on screen
	closed  bool
	stop    chan struct{}
	stopped chan struct{}
}

func (v *liveView) tick() {
	defer close(v.stopped)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
			v.mu.Lock()
			v.redraw()
			v.mu.Unlock()
		}
	}
}

func (v *liveView) message([]byte, *jsonmessage.JSONMessage) {}

func (v *liveView) step(l *buildLog, prev int, prevCached bool, prevElapsed time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clear()
	if prev > 0 {
		v.finished(prev, l.steps, prevCached, prevElapsed)
	}
	v.l = &buildLog{step: l.step, steps: l.steps, instr: l.instr, stepStart: l.stepStart}
	v.redraw()
}

func (v *liveView) line(l *buildLog, line string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.l != nil {
		v.l.last = line
	}
	v.redraw()
}

func (v *liveView) done(l *buildLog, res BuildResult) {
	v.finish(func() {
		if l.step > 0 {
			v.finished(l.step, l.steps, l.cached, v.p.now().Sub(l.stepStart))
		}
		fmt.Fprintf(v.p.Out, "built %s (%s) in %s\n", res.Tag, shortID(res.ID), fmtElapsed(res.Elapsed))
	})
}

func (v *liveView) failed(l *buildLog, e *BuildError) {
	v.finish(func() {
		if e != nil {
			fmt.Fprint(v.p.Out, e.Summary())
		}
	})
}

func (v *liveView) finish(last func()) {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return
	}
	v.closed = true
	v.clear()
	last()
	v.mu.Unlock()
	close(v.stop)
	<-v.stopped
}

// finished prints the permanent line of a completed step.
func (v *liveView) finished(step, steps int, cached bool, elapsed time.Duration) {
	took := fmtElapsed(elapsed)
	if cached {
		took = "cached"
	}
	instr := ""
	if v.l != nil {
		instr = v.l.instr
	}
	head := fmt.Sprintf("[%d/%d] ", step, steps)
	fmt.Fprintf(v.p.Out, "%s%s  %s\n", head, ellipsis(instr, v.p.width()-len(head)-len(took)-3), took)
}

func (v *liveView) clear() {
	if v.drawn > 0 {
		fmt.Fprintf(v.p.Out, "\x1b[%dA\r\x1b[J", v.drawn)
		v.drawn = 0
	}
}

func (v *liveView) redraw() {
	if v.closed || v.l == nil {
		return
	}
	w := v.p.width()
	now := v.p.now()
	head := fmt.Sprintf("[%d/%d] ", v.l.step, v.l.steps)
	clock := fmt.Sprintf("%s (total %s)", fmtElapsed(now.Sub(v.l.stepStart)), fmtElapsed(now.Sub(v.start)))
	v.clear()
	fmt.Fprintf(v.p.Out, "%s%s  %s\n", head, ellipsis(v.l.instr, w-len(head)-len(clock)-3), clock)
	v.drawn = 1
	if v.l.last != "" {
		fmt.Fprintf(v.p.Out, "      %s\n", ellipsis(v.l.last, w-7))
		v.drawn++
	}
}
