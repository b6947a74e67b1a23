package imagebuild

import (
	"fmt"
	"time"
)

// Progress receives what Images does, as it happens, in order, on the goroutine that called
// it. A nil Progress discards everything.
type Progress func(Event)

func (p Progress) emit(e Event) {
	if p != nil {
		p(e)
	}
}

// notef sends a Note.
func (p Progress) notef(format string, a ...any) {
	if p != nil {
		p(Note{Text: fmt.Sprintf(format, a...)})
	}
}

// Event is one thing a renderer may show: a Note, or one of a build's BuildStarted, Message,
// StepStarted, Output, StepDone and, last, BuildDone or BuildFailed. Events carry plain data;
// how to show them is the renderer's business.
type Event interface{ event() }

// Note is a remark or warning between builds: why an image is built, that one is stale, that
// a replaced one was removed.
type Note struct {
	Text string // whole lines, each ending in a newline
}

// BuildStarted opens the events of one build, once the engine has accepted it.
type BuildStarted struct {
	Profile, Tag string
}

// Message is one message of the engine's build stream, before it is interpreted.
type Message struct {
	Raw    []byte // the message as the engine sent it (JSON)
	Stream string // its build-log text as sent, "" when it has none
	// Pull is its status line, such as a layer's pull progress ("<layer> Downloading"),
	// "" when it has none.
	Pull string
}

// StepStarted is a Dockerfile step the builder began.
type StepStarted struct {
	Step, Steps int
	Instruction string // with runs of white space collapsed
}

// Output is one line of the current step's output, as a terminal would show it
// (termtext.Clean).
type Output struct {
	Line string
}

// StepDone is a step that finished, when the next one began or the build ended.
type StepDone struct {
	Step, Steps int
	Instruction string
	Cached      bool // the builder reused an earlier result
	Elapsed     time.Duration
}

// BuildDone ends the events of a build that succeeded.
type BuildDone struct {
	Result BuildResult
}

// BuildFailed ends the events of a build that failed. Err is nil when the stream broke or
// the build was cancelled, rather than the engine reporting a failure.
type BuildFailed struct {
	Err *BuildError
}

// PullStarted opens the events of one pull, once the engine has accepted it: Message events
// follow, then PullDone or PullFailed.
type PullStarted struct {
	Ref, Registry string
	AuthSource    string // where the credentials came from, "" for none
}

// PullDone ends the events of a pull that succeeded.
type PullDone struct {
	Ref, ID string
	Elapsed time.Duration
}

// PullFailed ends the events of a pull that failed.
type PullFailed struct {
	Err error
}

func (PullStarted) event()  {}
func (PullDone) event()     {}
func (PullFailed) event()   {}
func (Note) event()         {}
func (BuildStarted) event() {}
func (Message) event()      {}
func (StepStarted) event()  {}
func (Output) event()       {}
func (StepDone) event()     {}
func (BuildDone) event()    {}
func (BuildFailed) event()  {}
