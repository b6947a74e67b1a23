package config

import (
	"fmt"
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

// Hint is the fix of a single problem, or where to see them all.
func (e *ValidationError) Hint() string {
	if len(e.Problems) == 1 && e.Problems[0].Fix != "" {
		return e.Problems[0].Fix + " (sbx explain shows every key and its source)"
	}
	return "fix the settings above; sbx explain shows every key and its source"
}
