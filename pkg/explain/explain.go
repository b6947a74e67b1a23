// Package explain renders a resolved configuration: every value with its source, the
// security posture, validation problems, the tool policy and, when the engine answered, the
// sandbox's live state. It computes nothing of its own: judgments come from pkg/config and
// live state from the caller. It never imports Docker.
package explain

import (
	"maps"
	"slices"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/protect"
)

// Live is what the engine says about the sandbox. The lifecycle code fills it; explain only
// renders it.
type Live struct {
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"` // why the engine did not answer
	// Kind is what the engine is (engine.Kind), and LimitsProblem why it cannot apply a
	// sandbox's limits ("" when it can): new sandboxes are then refused.
	Kind          string `json:"kind,omitempty"`
	LimitsProblem string `json:"limitsProblem,omitempty"`
	// EgressPath is how a sandbox with egress rules reaches its proxy on this engine
	// (sandbox.EgressPath); "" without egress rules.
	EgressPath string `json:"egressPath,omitempty"`
	Exists     bool   `json:"exists"`
	Running    bool   `json:"running"`
	Status     string `json:"status,omitempty"` // the engine's status text, e.g. "Up 3 minutes"
	// HashMatches is true when the container's stored config hash equals the resolved one.
	HashMatches   bool     `json:"hashMatches"`
	DifferingKeys []string `json:"differingKeys,omitempty"`
	// Carriage is how the workspace reaches the sandbox (sandbox.Carriage): bind, overlay,
	// volume, or copy on an engine that cannot see the project; for one not yet made, how it
	// would.
	Carriage string `json:"carriage,omitempty"`
	// Commands is how the sandbox runs commands (sandbox.CommandPath): "agent" or "engine
	// exec", with CommandsWhy for the engine; for one not yet made, how it would.
	Commands    string `json:"commands,omitempty"`
	CommandsWhy string `json:"commandsWhy,omitempty"`
	// Toolbox is true when sbx's scripts run with the toolbox it mounts (an image it does
	// not bundle).
	Toolbox bool `json:"toolbox,omitempty"`
	// Pool is the pool of this configuration (sandbox.FillPool), when its pool key is set.
	Pool *Pool `json:"pool,omitempty"`
	// ApplyCommand applies the resolved config, e.g. "sbx create --replace".
	ApplyCommand string `json:"applyCommand,omitempty"`
}

// Pool is what the pool holds for the resolved configuration.
type Pool struct {
	Size  int    `json:"size"`
	Ready int    `json:"ready"` // pooled sandboxes of its key that run
	Key   string `json:"key,omitempty"`
	// NotPooled is why a new sandbox of this configuration is never taken from the pool.
	NotPooled string `json:"notPooled,omitempty"`
}

// Options select what a report holds beyond the resolved config.
type Options struct {
	// Tool asks for the policy decision of one tool (--tool).
	Tool string
	// Live is the engine's answer; nil when the engine was not checked.
	Live *Live
	// Protected is what a rw workspace keeps read-only; nil when not looked for.
	Protected *Protected
	// EgressRuntime is what "sbx egress allow|deny" changed of the sandbox's rules; nil
	// when it has none (no sandbox, no egress, or not looked for).
	EgressRuntime *EgressRuntime
	// EgressHost and EgressPort ask for the egress decision of one destination (--egress).
	EgressHost string
	EgressPort int
}

// EgressRuntime are the destinations allowed and denied at runtime, beside the config's.
type EgressRuntime struct {
	Allowed []string `json:"allowed"`
	Denied  []string `json:"denied"`
}

// Protected is what a rw workspace mounts read-only over the project (and the directories it
// pins so they cannot be renamed), or why the sandbox cannot be created.
type Protected struct {
	*protect.Plan
	Error string `json:"error,omitempty"`
}

// Report is everything explain shows. Its JSON field names are stable: scripts rely on them.
type Report struct {
	Sandbox  Sandbox          `json:"sandbox"`
	Files    []config.File    `json:"files"`
	Trust    Trust            `json:"trust"`
	Skipped  []config.Skipped `json:"skipped"`
	Settings []Setting        `json:"settings"`
	Posture  []Posture        `json:"posture"`
	Valid    bool             `json:"valid"`
	Problems []Problem        `json:"problems"`
	Warnings []Problem        `json:"warnings"`
	Tools    Tools            `json:"tools"`
	Egress   Egress           `json:"egress"`
	// Protected is null unless the workspace is rw and explain looked.
	Protected *Protected       `json:"protected"`
	Engine    Engine           `json:"engine"`
	Config    config.Config    `json:"config"` // secret-looking env values masked
	Keys      []config.KeyInfo `json:"keys"`
}

// Sandbox identifies the sandbox and says where its execs run.
type Sandbox struct {
	Name            string `json:"name"`
	DefaultName     bool   `json:"defaultName"`
	Container       string `json:"container"`
	ProjectRoot     string `json:"projectRoot"`
	ProjectRootFrom string `json:"projectRootFrom"`
	// Execs is "sandbox" or "host".
	Execs      string `json:"execs"`
	Mode       string `json:"mode"`
	ModeSource string `json:"modeSource"`
}

// Trust is whether the project file may loosen the sandbox, and what it loosens: refused while
// it is untrusted, in effect once the user trusted it.
type Trust struct {
	config.Trust
	Loosenings []config.Loosening `json:"loosenings"`
}

// Setting is one key's value and where it came from. Elements of lists and maps
// ("tmpfs[0]", "env.LANG") have their own rows, without a description.
type Setting struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	Source      string `json:"source"`
	Note        string `json:"note,omitempty"`
	Description string `json:"description,omitempty"`
	Env         string `json:"env,omitempty"`
}

// Posture is one protection and how the config leaves it: ok, weakened or danger.
type Posture struct {
	Name   string `json:"name"`
	Level  string `json:"level"`
	Detail string `json:"detail"`
	Risk   string `json:"risk,omitempty"`
	Key    string `json:"key,omitempty"`
	Source string `json:"source,omitempty"`
}

// Problem is a refused or questionable setting.
type Problem struct {
	Severity string `json:"severity"`
	Key      string `json:"key"`
	Source   string `json:"source"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Value    string `json:"value,omitempty"`
	Reason   string `json:"reason"`
	Fix      string `json:"fix"`
	Message  string `json:"message"`
}

// Tools is the tool policy and its decision for every known tool.
type Tools struct {
	Allow       []string   `json:"allow"`
	AllowSource string     `json:"allowSource"`
	Deny        []string   `json:"deny"`
	DenySource  string     `json:"denySource"`
	Decisions   []Decision `json:"decisions"`
	// Query is the decision for --tool, with the fix when it is denied.
	Query *Decision `json:"query,omitempty"`
}

// Decision is the policy's answer for one tool.
type Decision struct {
	Tool    string `json:"tool"`
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule"`
	Key     string `json:"key"`
	Source  string `json:"source"`
	Reason  string `json:"reason"`
	Fix     string `json:"fix,omitempty"`
}

// Egress is the allowlist sbx's proxy enforces: the config's rules, presets expanded, in
// the order the proxy decides by. No rules means no proxy.
type Egress struct {
	Rules  []EgressRule `json:"rules"`
	Source string       `json:"source"`
	// Runtime is null unless the sandbox exists with runtime changes looked for.
	Runtime *EgressRuntime `json:"runtime"`
	// Query is the decision for --egress.
	Query *EgressDecision `json:"query,omitempty"`
}

// EgressDecision is the proxy's answer for one destination, by name or address literal,
// before resolving: a name allowed here is still refused if it resolves to a reserved or
// internal address that no address rule names.
type EgressDecision struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule,omitempty"`
	Preset  string `json:"preset,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// EgressRule is one allowed destination and the preset it came from, "" for one written as is.
type EgressRule struct {
	Rule   string `json:"rule"`
	Preset string `json:"preset,omitempty"`
}

// Engine is the live part; Checked is false when the engine was not asked.
type Engine struct {
	Checked bool `json:"checked"`
	Live
}

// Build assembles the report of a resolved config. r may carry problems: a refused config is
// exactly what explain must show.
func Build(r *config.Resolved, opts Options) Report {
	c := r.Config
	rep := Report{
		Sandbox: Sandbox{Name: r.Name, DefaultName: r.IsDefaultName, Container: r.ContainerName(),
			ProjectRoot: r.ProjectRoot, ProjectRootFrom: r.ProjectRootFrom, Execs: "sandbox",
			Mode: c.Mode, ModeSource: r.Sources["mode"].String()},
		Files:    r.Files,
		Trust:    Trust{Trust: r.Trust, Loosenings: r.Loosenings},
		Skipped:  r.Skipped,
		Valid:    len(r.Problems) == 0,
		Problems: problems(r.Problems),
		Warnings: problems(r.Warnings),
		Config:   masked(c),
	}
	if r.ExecsOnHost() {
		rep.Sandbox.Execs = "host"
	}
	if rep.Files == nil {
		rep.Files = []config.File{}
	}
	if rep.Skipped == nil {
		rep.Skipped = []config.Skipped{}
	}
	if rep.Trust.Loosenings == nil {
		rep.Trust.Loosenings = []config.Loosening{}
	}
	keys := map[string]config.KeyInfo{}
	for _, k := range config.Keys() {
		keys[k.Key] = k
	}
	for _, e := range r.Entries() {
		k := keys[e.Key]
		rep.Settings = append(rep.Settings, Setting{Key: e.Key, Value: e.Value, Source: e.Source.String(), Note: e.Note,
			Description: k.Description, Env: k.Env})
	}
	for _, p := range config.Posture(r) {
		src := ""
		if p.Key != "" {
			src = p.Source.String()
		}
		rep.Posture = append(rep.Posture, Posture{Name: p.Name, Level: p.Level, Detail: p.Detail, Risk: p.Risk, Key: p.Key, Source: src})
	}
	rep.Tools = Tools{Allow: nonNil(c.Tools.Allow), AllowSource: r.Sources["tools.allow"].String(),
		Deny: nonNil(c.Tools.Deny), DenySource: r.Sources["tools.deny"].String()}
	for _, t := range config.ToolNames {
		rep.Tools.Decisions = append(rep.Tools.Decisions, decision(r, t))
	}
	if opts.Tool != "" {
		d := decision(r, opts.Tool)
		rep.Tools.Query = &d
	}
	rep.Egress = Egress{Rules: []EgressRule{}, Source: r.Sources["egress"].String()}
	for _, rule := range r.EgressRules() {
		rep.Egress.Rules = append(rep.Egress.Rules, EgressRule{Rule: rule.Text, Preset: rule.Preset})
	}
	rep.Egress.Runtime = opts.EgressRuntime
	if opts.EgressHost != "" {
		rep.Egress.Query = egressDecision(r, opts)
	}
	if opts.Live != nil {
		rep.Engine = Engine{Checked: true, Live: *opts.Live}
	}
	if p := opts.Protected; p != nil && (p.Plan != nil || p.Error != "") {
		rep.Protected = p
	}
	return rep
}

func decision(r *config.Resolved, tool string) Decision {
	d := r.DecideTool(tool)
	out := Decision{Tool: d.Tool, Allowed: d.Allowed, Rule: d.Rule, Key: d.Key, Reason: d.Reason}
	if d.Key != "" {
		out.Source = d.Source.String()
	}
	if !d.Allowed {
		out.Fix = errs.Hint(config.CheckTool(r, tool))
	}
	return out
}

// egressDecision decides opts' destination by the config's rules and the runtime changes,
// with the code the proxy runs.
func egressDecision(r *config.Resolved, opts Options) *EgressDecision {
	q := &EgressDecision{Host: opts.EgressHost, Port: opts.EgressPort}
	if len(r.Config.Egress) == 0 {
		q.Reason = "the sandbox has no egress rules, so no proxy: network " + r.Config.Network + " alone decides"
		return q
	}
	f := egress.File{Allow: r.Config.Egress}
	if rt := opts.EgressRuntime; rt != nil {
		f.Allow, f.Deny = append(slices.Clone(f.Allow), rt.Allowed...), rt.Denied
	}
	p, err := f.Policy()
	if err != nil {
		q.Reason = err.Error()
		return q
	}
	d := p.Decide(opts.EgressHost, opts.EgressPort)
	q.Allowed, q.Rule, q.Preset, q.Reason = d.Allowed, d.Rule, d.Preset, d.Reason
	return q
}

func problems(ps []config.Problem) []Problem {
	out := []Problem{}
	for _, p := range ps {
		out = append(out, Problem{Severity: p.Severity, Key: p.Key, Source: p.Source.String(), File: p.Source.File, Line: p.Source.Line,
			Value: p.Value, Reason: p.Reason, Fix: p.Fix, Message: p.String()})
	}
	return out
}

// masked copies c with secret-looking env values replaced, so no output ever carries them.
func masked(c config.Config) config.Config {
	c.Env = maps.Clone(c.Env)
	for name, v := range c.Env {
		c.Env[name] = config.MaskEnv(name, v)
	}
	return c
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
