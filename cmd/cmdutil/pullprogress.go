package cmdutil

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/docker/go-units"

	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// newPullView picks how a pull is shown: plain and json as a build's, and in auto mode a
// line to start and one to end, with one live line of the layers' progress on a terminal.
func (p *BuildProgress) newPullView(start imagebuild.PullStarted) func(imagebuild.Event) {
	switch p.mode() {
	case "", "quiet":
		return nil
	case ProgressJSON:
		return p.json
	case ProgressPlain:
		return p.plain
	}
	creds := "without credentials"
	if start.AuthSource != "" {
		creds = "with credentials from " + start.AuthSource
	}
	fmt.Fprintf(p.Out, "pulling %s from %s (%s)\n", termtext.Clean(start.Ref), start.Registry, termtext.Clean(creds))
	v := &pullView{p: p, layers: map[string]*layerProgress{}}
	return v.show
}

type layerProgress struct {
	status         string
	current, total int64
}

// pullView adds up the layers' progress from the engine's messages.
type pullView struct {
	p      *BuildProgress
	layers map[string]*layerProgress
	drawn  bool
}

func (v *pullView) show(ev imagebuild.Event) {
	switch e := ev.(type) {
	case imagebuild.Message:
		var msg jsonmessage.JSONMessage
		// "Pulling from REPO" carries the tag as its ID; the other messages with one are a layer's.
		if json.Unmarshal(e.Raw, &msg) != nil || msg.ID == "" || msg.Status == "" || strings.HasPrefix(msg.Status, "Pulling from ") {
			return
		}
		l := v.layers[msg.ID]
		if l == nil {
			l = &layerProgress{}
			v.layers[msg.ID] = l
		}
		l.status = msg.Status
		if msg.Progress != nil && msg.Status == "Downloading" {
			l.current, l.total = msg.Progress.Current, msg.Progress.Total
		}
		if v.p.TTY {
			v.redraw()
		}
	case imagebuild.PullDone:
		v.clear()
		fmt.Fprintf(v.p.Out, "pulled %s (%s) in %s\n", termtext.Clean(e.Ref), imagebuild.ShortID(e.ID), fmtElapsed(e.Elapsed))
	case imagebuild.PullFailed:
		v.clear()
	}
}

func (v *pullView) clear() {
	if v.drawn {
		fmt.Fprint(v.p.Out, "\x1b[1A\r\x1b[J")
		v.drawn = false
	}
}

func (v *pullView) redraw() {
	var done int
	var cur, total int64
	for _, l := range v.layers {
		switch l.status {
		case "Pull complete", "Already exists", "Download complete":
			done++
		}
		cur, total = cur+l.current, total+l.total
	}
	line := fmt.Sprintf("  %d/%d layers", done, len(v.layers))
	if total > 0 {
		line += fmt.Sprintf(", %s of %s", units.HumanSizeWithPrecision(float64(cur), 3), units.HumanSizeWithPrecision(float64(total), 3))
	}
	v.clear()
	fmt.Fprintln(v.p.Out, termtext.Ellipsis(line, v.p.width()))
	v.drawn = true
}
