package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Severity of a problem.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// Problem is one refused (or, as a warning, questionable) setting: which key, where it was
// set, the offending value, why, and how to fix it.
type Problem struct {
	Severity string
	Key      string
	Source   Source
	Value    string // already masked when the key names a secret
	Reason   string
	Fix      string
	// Untrusted marks a setting refused only because the project file that loosens with it
	// is not trusted.
	Untrusted bool
}

// String renders the problem on one line: "project:/p/.sbx.yaml:3: memory "8m": below the 16m minimum".
func (p Problem) String() string {
	var b strings.Builder
	if s := p.Source.String(); s != "" && p.Source.Layer != "" {
		b.WriteString(s + ": ")
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		if p.Value != "" {
			fmt.Fprintf(&b, " %q", p.Value)
		}
		b.WriteString(": ")
	}
	b.WriteString(p.Reason)
	return b.String()
}

// ValidationError is returned when any setting is refused. Nothing may be created from a
// config that produced one; it exits 125.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return "config refused: " + e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config refused (%d problems):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
		if p.Fix != "" {
			b.WriteString("\n    fix: " + p.Fix)
		}
	}
	return b.String()
}

// ExitCode is 125: sbx refuses to act.
func (e *ValidationError) ExitCode() int { return errs.CodeFailure }

// Hint is the fix of a single problem, the way to trust a project file, or where to see them all.
func (e *ValidationError) Hint() string {
	if i := slices.IndexFunc(e.Problems, func(p Problem) bool { return p.Untrusted }); i >= 0 {
		return "review " + e.Problems[i].Source.File + ", then run \"sbx trust\" to let it loosen the sandbox (it shows what it loosens and asks first); or move those settings to your own config"
	}
	if len(e.Problems) == 1 && e.Problems[0].Fix != "" {
		return e.Problems[0].Fix + " (sbx explain shows every key and its source)"
	}
	return "fix the settings above; sbx explain shows every key and its source"
}
