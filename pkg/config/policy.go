package config

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Decision is the tool policy's answer for one tool, with the rule that made it.
type Decision struct {
	Tool    string `json:"tool"`
	Allowed bool   `json:"allowed"`
	// Rule is the matching pattern; "" when a non-empty allow list matched nothing.
	Rule string `json:"rule"`
	// Key is the list that decided: "tools.deny[0]", "tools.allow[1]", or "tools.allow".
	Key    string `json:"key"`
	Source Source `json:"-"`
	Reason string `json:"reason"`
}

// DecideTool applies the tool policy to a tool: deny wins; a non-empty allow list blocks
// what it does not match; * globs.
func (r *Resolved) DecideTool(tool string) Decision {
	t := r.Config.Tools
	for i, pat := range t.Deny {
		if globMatch(pat, tool) {
			key := fmt.Sprintf("tools.deny[%d]", i)
			return Decision{Tool: tool, Rule: pat, Key: key, Source: r.sourceOf(key, "tools.deny"),
				Reason: fmt.Sprintf("denied by %q in tools.deny", pat)}
		}
	}
	for i, pat := range t.Allow {
		if globMatch(pat, tool) {
			key := fmt.Sprintf("tools.allow[%d]", i)
			return Decision{Tool: tool, Allowed: true, Rule: pat, Key: key, Source: r.sourceOf(key, "tools.allow"),
				Reason: fmt.Sprintf("allowed by %q in tools.allow", pat)}
		}
	}
	if len(t.Allow) > 0 {
		return Decision{Tool: tool, Key: "tools.allow", Source: r.sourceOf("tools.allow", "tools.allow"),
			Reason: fmt.Sprintf("not matched by tools.allow [%s]", strings.Join(t.Allow, ", "))}
	}
	return Decision{Tool: tool, Allowed: true, Reason: "no rule matches and tools.allow is empty"}
}

func (r *Resolved) sourceOf(key, fallback string) Source {
	if s, ok := r.Sources[key]; ok {
		return s
	}
	return r.Sources[fallback]
}

func globMatch(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

// PolicyError is a tool the policy denies; it exits 125.
type PolicyError struct {
	Decision Decision
	hint     string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("tool %q is %s (%s)", e.Decision.Tool, e.Decision.Reason, e.Decision.Source)
}

// ExitCode is 125: sbx refuses to act.
func (e *PolicyError) ExitCode() int { return errs.CodeFailure }

// Hint names the key to change and where to see the decision.
func (e *PolicyError) Hint() string { return e.hint }

// CheckTool returns a *PolicyError when the policy denies tool, naming the rule, its source
// and the key to change.
func CheckTool(r *Resolved, tool string) error {
	d := r.DecideTool(tool)
	if d.Allowed {
		return nil
	}
	var fix string
	if strings.HasPrefix(d.Key, "tools.deny") {
		rest := slices.DeleteFunc(slices.Clone(r.Config.Tools.Deny), func(p string) bool { return p == d.Rule })
		fix = fmt.Sprintf("remove %q from tools.deny (e.g. tools: {deny: [%s]} in %s)", d.Rule, strings.Join(rest, ", "), ProjectFileName)
	} else {
		fix = fmt.Sprintf("add %q to tools.allow (e.g. tools: {allow: [%s]} in %s)", tool, strings.Join(append(slices.Clone(r.Config.Tools.Allow), tool), ", "), ProjectFileName)
	}
	return &PolicyError{Decision: d, hint: fix + "; see sbx explain --tool " + tool}
}
