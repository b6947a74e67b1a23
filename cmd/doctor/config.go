package doctor

import (
	"fmt"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// configChecks reports each config file sbx reads (user, project, and --config when given):
// valid, not found, or invalid with its first problem. They need no engine, so they run even
// when it is down; only an invalid file is required, since every command would refuse it.
func configChecks(opts *DoctorOptions) []Check {
	if opts.ResolveConfig == nil {
		return nil
	}
	r, err := opts.ResolveConfig()
	if r == nil {
		return []Check{{Name: "config", Status: StatusWarn, Detail: fmt.Sprintf("cannot resolve the config: %v", err), Fix: errs.Hint(err)}}
	}
	var checks []Check
	for _, file := range r.Files {
		c := Check{Name: file.Layer + " config", Status: StatusOK}
		var problems []config.Problem
		for _, p := range r.Problems {
			if p.Source.File == file.Path {
				problems = append(problems, p)
			}
		}
		switch {
		case len(problems) > 0:
			c.Status, c.Required = StatusFail, true
			c.Detail, c.Fix = problems[0].String(), problems[0].Fix
			if n := len(problems) - 1; n > 0 {
				c.Detail += fmt.Sprintf(" (and %d more; sbx explain --check lists them)", n)
			}
		case !file.Found:
			c.Detail = file.Path + " not found (optional)"
		default:
			c.Detail = file.Path + " valid"
		}
		checks = append(checks, c)
	}
	return checks
}
