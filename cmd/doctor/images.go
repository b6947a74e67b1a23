package doctor

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/docker/go-units"

	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/imagebuild"
)

// imageChecks reports each bundled image: present and current, missing (built on first use)
// or stale. None is required: a sandbox can still be created without them.
func imageChecks(ctx context.Context, eng engine.Engine, files fs.FS) []Check {
	imgs := &imagebuild.Images{Engine: eng, Files: files}
	list, err := imgs.List(ctx)
	if err != nil {
		return []Check{{Name: "images", Status: StatusWarn, Detail: err.Error(),
			Fix: "check that the engine answers image requests (sbx image ls)"}}
	}
	checks := make([]Check, 0, len(list))
	for _, st := range list {
		c := Check{Name: "image " + st.Profile, Status: StatusOK}
		fix := "sbx image build " + st.Profile
		switch st.State {
		case imagebuild.ImagePresent:
			c.Detail = fmt.Sprintf("%s, %s, current", st.Tag, units.HumanSizeWithPrecision(float64(st.Size), 3))
		case imagebuild.ImageMissing:
			c.Status, c.Fix = StatusWarn, fix
			c.Detail = st.Tag + " missing; built on first use"
		case imagebuild.ImageStale:
			c.Status, c.Fix = StatusWarn, fix
			c.Detail = fmt.Sprintf("%s stale: %s", st.Tag, st.Detail)
		}
		checks = append(checks, c)
	}
	return checks
}
