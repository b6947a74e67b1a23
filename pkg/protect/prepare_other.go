//go:build !unix

package protect

import (
	"fmt"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Prepare creates what the plan mounts but is missing; only Unix systems can do it safely.
func (p *Plan) Prepare() error {
	for _, m := range p.Mounts {
		if m.Create != "" {
			return errs.Failure(fmt.Errorf("protected paths: cannot create %s on this system", m.Path),
				"create it yourself (git init makes it), or use --workspace ro or none")
		}
	}
	return nil
}
