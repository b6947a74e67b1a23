package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/muesli/termenv"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// TextOptions choose the text form: TTY draws tables and marks, Color adds colour (off when
// NO_COLOR is set); without TTY the output is plain aligned columns with words for levels.
type TextOptions struct {
	TTY   bool
	Color bool
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(rep)
}

// WriteText writes the whole report for a person to read.
func WriteText(w io.Writer, rep Report, opts TextOptions) error {
	p := newPrinter(w, opts)
	p.sandbox(rep)
	p.files(rep.Files)
	p.trust(rep)
	p.settings(rep.Settings)
	p.posture(rep.Posture)
	p.protected(rep.Protected)
	p.problems(rep)
	p.tools(rep.Tools)
	p.egress(rep.Egress)
	p.engine(rep)
	return p.err
}

// WriteCheck writes only the validation result, for "explain --check".
func WriteCheck(w io.Writer, rep Report, opts TextOptions) error {
	p := newPrinter(w, opts)
	p.problems(rep)
	if rep.Valid {
		p.line(p.ok.Render(fmt.Sprintf("config of %s is valid", rep.Sandbox.Name)))
	} else {
		p.line(p.danger.Render(fmt.Sprintf("config of %s is refused: %d %s", rep.Sandbox.Name, len(rep.Problems), plural(len(rep.Problems), "problem"))))
	}
	return p.err
}

type printer struct {
	w    io.Writer
	tty  bool
	r    *lipgloss.Renderer
	err  error
	head lipgloss.Style
	dim  lipgloss.Style
	ok   lipgloss.Style
	weak lipgloss.Style

	danger lipgloss.Style
}

func newPrinter(w io.Writer, opts TextOptions) *printer {
	r := lipgloss.NewRenderer(w)
	r.SetHasDarkBackground(true)
	if opts.Color && opts.TTY {
		r.SetColorProfile(termenv.ANSI)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	p := &printer{w: w, tty: opts.TTY, r: r}
	p.head = r.NewStyle().Bold(true)
	p.dim = r.NewStyle().Faint(true)
	p.ok = r.NewStyle().Foreground(lipgloss.Color("2"))
	p.weak = r.NewStyle().Foreground(lipgloss.Color("3"))
	p.danger = r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true)
	return p
}

func (p *printer) line(s string) {
	if p.err == nil {
		_, p.err = fmt.Fprintln(p.w, s)
	}
}

func (p *printer) heading(s string) {
	if p.tty {
		p.line(p.head.Render(s))
	} else {
		p.line(s)
	}
}

// level renders a posture or severity mark: a coloured symbol on a TTY, a word otherwise.
func (p *printer) level(level string) string {
	marks := map[string][2]string{
		config.LevelOK: {"✓", "ok"}, config.LevelWeak: {"!", "weakened"}, config.LevelDanger: {"✗", "danger"},
		config.SeverityError: {"✗", "error"}, config.SeverityWarning: {"!", "warning"},
	}
	styles := map[string]lipgloss.Style{config.LevelOK: p.ok, config.LevelWeak: p.weak, config.LevelDanger: p.danger,
		config.SeverityError: p.danger, config.SeverityWarning: p.weak}
	m := marks[level]
	if !p.tty {
		return fmt.Sprintf("%-8s", m[1])
	}
	return styles[level].Render(m[0])
}

// rows prints aligned columns, indented by two spaces; the last column is not padded.
func (p *printer) rows(rows [][]string, style ...func(col int, s string) string) {
	widths := map[int]int{}
	for _, r := range rows {
		for i, c := range r[:len(r)-1] {
			widths[i] = max(widths[i], lipgloss.Width(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range r {
			cell := c
			if i < len(r)-1 {
				cell += strings.Repeat(" ", widths[i]-lipgloss.Width(c)+2)
			}
			if len(style) > 0 {
				cell = style[0](i, cell)
			}
			b.WriteString(cell)
		}
		p.line(strings.TrimRight(b.String(), " "))
	}
}

func (p *printer) sandbox(rep Report) {
	s := rep.Sandbox
	name := s.Name
	if s.DefaultName {
		name += " (the project's default sandbox)"
	}
	execs := "in the sandbox"
	if s.Execs == "host" {
		execs = "ON THE HOST, without isolation"
		if p.tty {
			execs = p.danger.Render(execs)
		}
	}
	p.heading("Sandbox")
	p.rows([][]string{
		{"name", name},
		{"container", s.Container},
		{"project root", fmt.Sprintf("%s (from %s)", s.ProjectRoot, s.ProjectRootFrom)},
		{"execs run", fmt.Sprintf("%s (mode %s, from %s)", execs, s.Mode, s.ModeSource)},
	})
}

func (p *printer) files(files []config.File) {
	p.line("")
	p.heading("Config files")
	var rows [][]string
	for _, f := range files {
		state := "not found"
		if f.Found {
			state = "found"
		}
		rows = append(rows, []string{f.Layer, f.Path, state})
	}
	p.rows(rows)
}

// trust says whether the project file is trusted and lists what it loosens. Its values are
// written by the file's author, so they are quoted.
func (p *printer) trust(rep Report) {
	for _, s := range rep.Skipped {
		p.line("  " + p.level(config.SeverityWarning) + " " + s.String())
	}
	t := rep.Trust
	if t.State == config.TrustNone {
		return
	}
	p.line("")
	p.heading("Trust of the project file")
	var state string
	switch t.State {
	case config.TrustTrusted:
		state = "trusted on " + t.TrustedAt.Format(time.DateOnly) + ": what it loosens is in effect (sbx trust --revoke takes it back)"
	case config.TrustChanged:
		state = "changed since you trusted it on " + t.TrustedAt.Format(time.DateOnly) + ": it may only tighten again; sbx trust reviews it"
	default:
		state = "not trusted: it may only tighten the sandbox; sbx trust reviews it"
	}
	p.rows([][]string{{"file", t.File}, {"sha256", t.SHA256}, {"state", state}})
	if t.Error != "" {
		p.line("  " + p.level(config.SeverityWarning) + " " + t.Error)
	}
	if len(t.Loosenings) == 0 {
		p.line("  it loosens nothing")
		return
	}
	verb := "refused"
	if t.State == config.TrustTrusted {
		verb = "in effect"
	}
	p.line(fmt.Sprintf("  it loosens (%s):", verb))
	rows := make([][]string, 0, len(t.Loosenings))
	for _, l := range t.Loosenings {
		rows = append(rows, []string{fmt.Sprintf("line %d", l.Source.Line), fmt.Sprintf("%s %q", l.Key, l.Value), l.Allows})
	}
	p.rows(rows)
}

func (p *printer) settings(settings []Setting) {
	p.line("")
	p.heading("Settings")
	rows := make([][]string, 0, len(settings))
	for _, s := range settings {
		v := s.Value
		if v == "" && s.Note != "" {
			v = "(" + s.Note + ")"
		}
		rows = append(rows, []string{s.Key, v, s.Source})
	}
	if !p.tty {
		p.rows(append([][]string{{"KEY", "VALUE", "SOURCE"}}, rows...))
		return
	}
	t := table.New().
		Border(lipgloss.RoundedBorder()).
		BorderStyle(p.dim).
		Headers("KEY", "VALUE", "SOURCE").
		Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			s := p.r.NewStyle().Padding(0, 1)
			switch {
			case row == table.HeaderRow:
				return s.Bold(true)
			case col == 2 && settings[row].Source != "default" && !strings.HasPrefix(settings[row].Source, "default ("):
				return s.Foreground(lipgloss.Color("6"))
			case col == 2:
				return s.Faint(true)
			}
			return s
		})
	p.line(t.String())
}

func (p *printer) posture(items []Posture) {
	p.line("")
	p.heading("Security posture")
	width := 0
	for _, it := range items {
		width = max(width, lipgloss.Width(it.Name))
	}
	markWidth := lipgloss.Width(p.level(config.LevelOK))
	for _, it := range items {
		p.line(fmt.Sprintf("  %s  %-*s  %s", p.level(it.Level), width, it.Name, it.Detail))
		if it.Level == config.LevelOK {
			continue
		}
		pad := strings.Repeat(" ", 2+markWidth+2+width+2)
		if it.Risk != "" {
			p.line(pad + "risk: " + it.Risk)
		}
		if it.Key != "" {
			p.line(pad + p.dim.Render(fmt.Sprintf("set by %s at %s", it.Key, it.Source)))
		}
	}
}

// protected lists what a rw workspace keeps read-only, leaving out the directories only pinned.
func (p *printer) protected(pr *Protected) {
	if pr == nil {
		return
	}
	p.line("")
	p.heading("Protected paths (read-only over the rw workspace)")
	if pr.Error != "" {
		p.line("  " + p.level(config.SeverityError) + " " + pr.Error)
		return
	}
	var rows [][]string
	for _, m := range pr.Mounts {
		if m.ReadOnly {
			rows = append(rows, []string{m.Path, m.Reason})
		}
	}
	if len(rows) == 0 {
		p.line("  none of the protected paths exist in the project")
	} else {
		p.rows(rows)
	}
	for _, w := range pr.Warnings {
		p.line("  " + p.level(config.SeverityWarning) + " " + w)
	}
}

func (p *printer) problems(rep Report) {
	for _, sec := range []struct {
		title string
		list  []Problem
	}{{"Problems", rep.Problems}, {"Warnings", rep.Warnings}} {
		p.line("")
		p.heading(sec.title)
		if len(sec.list) == 0 {
			p.line("  none")
			continue
		}
		for _, pr := range sec.list {
			p.line("  " + p.level(pr.Severity) + " " + pr.Message)
			if pr.Fix != "" {
				p.line("    fix: " + pr.Fix)
			}
		}
	}
}

func (p *printer) tools(t Tools) {
	p.line("")
	p.heading("Tool policy (deny wins; a non-empty allow list blocks the rest)")
	p.rows([][]string{
		{"allow", "[" + strings.Join(t.Allow, ", ") + "]", t.AllowSource},
		{"deny", "[" + strings.Join(t.Deny, ", ") + "]", t.DenySource},
	})
	var rows [][]string
	for _, d := range t.Decisions {
		rows = append(rows, []string{d.Tool, p.verdict(d), describeDecision(d)})
	}
	p.rows(rows)
	if q := t.Query; q != nil {
		p.line("")
		p.heading("Decision for --tool " + q.Tool)
		p.line("  " + p.verdict(*q) + ": " + describeDecision(*q))
		if q.Fix != "" {
			p.line("  fix: " + q.Fix)
		}
	}
}

func (p *printer) egress(e Egress) {
	p.line("")
	p.heading("Egress allowlist (through sbx's proxy; every other destination is refused)")
	if len(e.Rules) == 0 {
		p.line("  none: no proxy, the network setting alone decides")
	}
	var rows [][]string
	for _, r := range e.Rules {
		rows = append(rows, []string{r.Rule, r.Preset, e.Source})
	}
	p.rows(rows)
	if rt := e.Runtime; rt != nil {
		p.line("")
		p.heading("Egress changes at runtime (sbx egress allow|deny; gone when the sandbox is recreated)")
		p.rows([][]string{
			{"allowed", "[" + termtext.Clean(strings.Join(rt.Allowed, ", ")) + "]"},
			{"denied", "[" + termtext.Clean(strings.Join(rt.Denied, ", ")) + "]"},
		})
	}
	if q := e.Query; q != nil {
		p.line("")
		dest := termtext.Clean(net.JoinHostPort(q.Host, strconv.Itoa(q.Port)))
		p.heading("Decision for --egress " + dest)
		d := Decision{Allowed: q.Allowed}
		switch {
		case q.Allowed && q.Preset != "":
			p.line(fmt.Sprintf("  %s: by %q (%s); a name is still refused if it resolves to a reserved or internal address", p.verdict(d), q.Rule, q.Preset))
		case q.Allowed:
			p.line(fmt.Sprintf("  %s: by %q; a name is still refused if it resolves to a reserved or internal address", p.verdict(d), q.Rule))
		default:
			p.line("  " + p.verdict(d) + ": " + termtext.Clean(q.Reason))
		}
	}
}

func (p *printer) verdict(d Decision) string {
	switch {
	case !p.tty && d.Allowed:
		return "allowed"
	case !p.tty:
		return "denied"
	case d.Allowed:
		return p.ok.Render("allowed")
	}
	return p.danger.Render("denied")
}

func describeDecision(d Decision) string {
	if d.Source == "" {
		return d.Reason
	}
	return fmt.Sprintf("%s (%s)", d.Reason, d.Source)
}

func (p *printer) engine(rep Report) {
	p.line("")
	p.heading("Engine")
	e := rep.Engine
	switch {
	case !e.Checked:
		p.line("  not checked")
		return
	case !e.Reachable:
		p.line("  not reachable: " + e.Error)
		return
	}
	if e.Kind != "" {
		p.line("  engine: " + e.Kind)
	}
	if e.LimitsProblem != "" {
		p.line("  limits: " + e.LimitsProblem + ": new sandboxes are refused unless your own config sets dangerouslyAllowUnenforcedLimits")
	}
	if e.EgressPath != "" {
		p.line("  egress: the sandbox reaches its proxy through " + e.EgressPath)
	}
	switch {
	case !e.Exists:
		p.line(fmt.Sprintf("  container %s does not exist yet", rep.Sandbox.Container))
		p.carriage(e.Carriage)
		p.commands(e)
		p.pool(e.Pool)
		return
	}
	defer p.pool(e.Pool)
	defer p.commands(e)
	defer p.carriage(e.Carriage)
	state := "stopped"
	if e.Running {
		state = "running"
	}
	if e.Status != "" {
		state += " (" + e.Status + ")"
	}
	p.line(fmt.Sprintf("  container %s exists, %s", rep.Sandbox.Container, state))
	if e.HashMatches {
		p.line("  its config matches the resolved config")
		return
	}
	msg := "its config differs from the resolved config"
	if len(e.DifferingKeys) > 0 {
		msg += " in: " + strings.Join(e.DifferingKeys, ", ")
	}
	if p.tty {
		msg = p.weak.Render(msg)
	}
	p.line("  " + msg)
	if e.ApplyCommand != "" {
		p.line("  apply it with: " + e.ApplyCommand)
	}
}

// pool says what the pool holds for this configuration, or why it is not pooled.
func (p *printer) pool(pl *Pool) {
	switch {
	case pl == nil:
	case pl.NotPooled != "":
		p.line(fmt.Sprintf("  pool: %d, but this configuration is not pooled: %s", pl.Size, pl.NotPooled))
	default:
		p.line(fmt.Sprintf("  pool: %d of %d started sandboxes ready (key %s); a new sandbox of this configuration is taken from them (only workspace none, without binds, egress, caCerts or ports, is pooled)", pl.Ready, pl.Size, pl.Key))
	}
}

// carriage says how the workspace reaches the sandbox when it is a carried copy; the other
// ways are what the workspace mode says.
func (p *printer) carriage(c string) {
	if c == "copy" {
		p.line("  workspace: a copy of the project in the sandbox's volume, as the engine cannot see it; sbx sync sends host changes, sbx diff and apply bring the sandbox's back")
	}
}

// commands says which way the sandbox runs commands, and why when it is not sbx's agent.
func (p *printer) commands(e Engine) {
	tools := ""
	if e.Toolbox {
		tools = "; sbx's helpers run with its toolbox (static bash and busybox at /run/sbx-tools)"
	}
	switch e.Commands {
	case "agent":
		p.line("  commands: through sbx's agent, which sbx brings into the sandbox" + tools)
	case "":
	default:
		p.line("  commands: through the engine's exec: " + e.CommandsWhy + tools)
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
