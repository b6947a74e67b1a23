package cmdutil

import (
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// Progress modes of an image build.
const (
	ProgressAuto  = "auto"  // a live view on a terminal, one line per step elsewhere
	ProgressPlain = "plain" // the build log as the engine streams it
	ProgressJSON  = "json"  // the engine's JSON messages, one per line
)

// ProgressModes lists the valid BuildProgress.Mode values.
var ProgressModes = []string{ProgressAuto, ProgressPlain, ProgressJSON}

// BuildProgress draws the events of image builds (imagebuild.Progress) on Out. It serves
// every command that may build an image, one build after another.
type BuildProgress struct {
	Out   io.Writer // usually stderr
	Mode  string    // ProgressAuto (also when ""), ProgressPlain or ProgressJSON
	TTY   bool      // Out is a terminal, so auto mode redraws a live view
	Quiet bool      // show nothing but a failed build's summary
	// Width is the terminal's width in columns; 0 asks the terminal behind Out, else 80.
	Width int
	Now   func() time.Time // nil means time.Now

	view func(imagebuild.Event) // the build being shown; nil between builds and when silent
}

// Show draws ev; pass it as an imagebuild.Progress.
func (p *BuildProgress) Show(ev imagebuild.Event) {
	switch e := ev.(type) {
	case imagebuild.Note:
		if m := p.mode(); m == ProgressAuto || m == ProgressPlain {
			fmt.Fprint(p.Out, e.Text)
		}
		return
	case imagebuild.BuildStarted:
		p.view = p.newView(e)
	case imagebuild.PullStarted:
		p.view = p.newPullView(e)
	case imagebuild.PullFailed:
		if p.view == nil {
			return // refused before it began: the error says why
		}
	}
	if p.view == nil {
		return
	}
	p.view(ev)
	switch ev.(type) {
	case imagebuild.BuildDone, imagebuild.BuildFailed, imagebuild.PullDone, imagebuild.PullFailed:
		p.view = nil
	}
}

func (p *BuildProgress) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *BuildProgress) mode() string {
	switch {
	case p.Out == nil:
		return ""
	case p.Quiet:
		return "quiet"
	case p.Mode == "":
		return ProgressAuto
	}
	return p.Mode
}

func (p *BuildProgress) width() int {
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

func (p *BuildProgress) newView(start imagebuild.BuildStarted) func(imagebuild.Event) {
	switch p.mode() {
	case "":
		return nil
	case "quiet":
		return p.summary
	case ProgressJSON:
		return p.json
	case ProgressPlain:
		return p.plain
	}
	// The build of a setup's image was announced in a Note, with what it is built on.
	if start.Profile != "" {
		fmt.Fprintf(p.Out, "building %s (profile %s)\n", start.Tag, start.Profile)
	}
	if p.TTY {
		return newLiveView(p).show
	}
	return p.steps
}

// summary shows nothing but a failure's summary.
func (p *BuildProgress) summary(ev imagebuild.Event) {
	if e, ok := ev.(imagebuild.BuildFailed); ok && e.Err != nil {
		fmt.Fprint(p.Out, e.Err.Summary())
	}
}

// json passes on the engine's messages.
func (p *BuildProgress) json(ev imagebuild.Event) {
	if e, ok := ev.(imagebuild.Message); ok {
		fmt.Fprintf(p.Out, "%s\n", e.Raw)
	}
}

// plain streams the log as the engine sends it.
func (p *BuildProgress) plain(ev imagebuild.Event) {
	if e, ok := ev.(imagebuild.Message); ok {
		switch {
		case e.Stream != "":
			fmt.Fprint(p.Out, e.Stream)
		case e.Pull != "":
			fmt.Fprintln(p.Out, e.Pull)
		}
	}
}

// steps prints a line as each step starts, for logs that are not a terminal.
func (p *BuildProgress) steps(ev imagebuild.Event) {
	switch e := ev.(type) {
	case imagebuild.StepStarted:
		fmt.Fprintf(p.Out, "[%d/%d] %s\n", e.Step, e.Steps, termtext.Ellipsis(e.Instruction, 100))
	case imagebuild.BuildDone:
		p.built(e.Result)
	default:
		p.summary(ev)
	}
}

func (p *BuildProgress) built(res imagebuild.BuildResult) {
	fmt.Fprintf(p.Out, "built %s (%s) in %s\n", res.Tag, imagebuild.ShortID(res.ID), fmtElapsed(res.Elapsed))
}

// liveView redraws the bottom of a terminal: the current step with its elapsed time and,
// once there is one, the step's last output line. Finished steps scroll up above them.
type liveView struct {
	p     *BuildProgress
	start time.Time

	mu        sync.Mutex
	step      *imagebuild.StepStarted // the step on screen, nil between steps
	stepStart time.Time
	last      string // the step's last output line
	drawn     int    // lines of the live area on screen
	closed    bool
	stop      chan struct{}
	stopped   chan struct{}
}

func newLiveView(p *BuildProgress) *liveView {
	v := &liveView{p: p, start: p.now(), stop: make(chan struct{}), stopped: make(chan struct{})}
	go v.tick()
	return v
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

func (v *liveView) show(ev imagebuild.Event) {
	switch e := ev.(type) {
	case imagebuild.StepStarted:
		v.mu.Lock()
		defer v.mu.Unlock()
		v.clear()
		v.step, v.stepStart, v.last = &e, v.p.now(), ""
		v.redraw()
	case imagebuild.Output:
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.step != nil {
			v.last = e.Line
		}
		v.redraw()
	case imagebuild.StepDone:
		v.mu.Lock()
		defer v.mu.Unlock()
		v.clear()
		v.finished(e)
		v.step = nil
	case imagebuild.BuildDone:
		v.finish(func() { v.p.built(e.Result) })
	case imagebuild.BuildFailed:
		v.finish(func() { v.p.summary(e) })
	}
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
func (v *liveView) finished(e imagebuild.StepDone) {
	took := fmtElapsed(e.Elapsed)
	if e.Cached {
		took = "cached"
	}
	head := fmt.Sprintf("[%d/%d] ", e.Step, e.Steps)
	fmt.Fprintf(v.p.Out, "%s%s  %s\n", head, termtext.Ellipsis(e.Instruction, v.p.width()-len(head)-len(took)-3), took)
}

func (v *liveView) clear() {
	if v.drawn > 0 {
		fmt.Fprintf(v.p.Out, "\x1b[%dA\r\x1b[J", v.drawn)
		v.drawn = 0
	}
}

func (v *liveView) redraw() {
	if v.closed || v.step == nil {
		return
	}
	w := v.p.width()
	now := v.p.now()
	head := fmt.Sprintf("[%d/%d] ", v.step.Step, v.step.Steps)
	clock := fmt.Sprintf("%s (total %s)", fmtElapsed(now.Sub(v.stepStart)), fmtElapsed(now.Sub(v.start)))
	v.clear()
	fmt.Fprintf(v.p.Out, "%s%s  %s\n", head, termtext.Ellipsis(v.step.Instruction, w-len(head)-len(clock)-3), clock)
	v.drawn = 1
	if v.last != "" {
		fmt.Fprintf(v.p.Out, "      %s\n", termtext.Ellipsis(v.last, w-7))
		v.drawn++
	}
}

func fmtElapsed(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}
