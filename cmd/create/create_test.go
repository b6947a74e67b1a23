package create

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestCreateRunCreates(t *testing.T) {
	e := cmdtest.NewEnv(t, &enginetest.FakeEngine{ContainerInspectFn: cmdtest.Inspect()})
	var created *container.Config
	var host *container.HostConfig
	e.Fake.ImageInspectFn = func(_ context.Context, ref string) (image.InspectResponse, error) {
		return image.InspectResponse{ID: "sha256:" + ref}, nil
	}
	e.Fake.ContainerCreateFn = func(_ context.Context, cfg *container.Config, hc *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
		if name != sandbox.ContainerName("web") {
			t.Errorf("container %q", name)
		}
		created, host = cfg, hc
		return container.CreateResponse{ID: "c1"}, nil
	}
	e.Fake.ContainerStartFn = func(context.Context, string, container.StartOptions) error { return nil }
	e.Fake.ContainerListFn = func(context.Context, container.ListOptions) ([]container.Summary, error) { return nil, nil }
	err := createRun(context.Background(), &CreateOptions{IO: e.IO, Factory: e.F, Name: "web", JSON: true,
		Layer: []config.Setting{{Key: "memory", Values: []string{"1g"}, Source: config.Source{Layer: config.LayerFlag, Name: "--memory"}}}})
	if err != nil {
		t.Fatalf("%v\n%s", err, e.Err)
	}
	var res Result
	if err := json.Unmarshal(e.Out.Bytes(), &res); err != nil || res.Name != "web" || res.Container != "sbx-web" || res.ID != "c1" ||
		res.Action != "created" || res.Project != e.Project || res.Image != created.Image {
		t.Errorf("%v: %s", err, e.Out)
	}
	if host.Memory != 1<<30 || created.Labels[sandbox.LabelCreateSettings] == "" {
		t.Errorf("the --memory flag is not on the sandbox: memory %d, labels %v", host.Memory, created.Labels)
	}
}

// An existing sandbox of the same configuration is reported ready; one whose configuration
// changed is refused with the keys that differ, exit 125.
func TestCreateRunExisting(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	if err := createRun(context.Background(), &CreateOptions{IO: e.IO, Factory: e.F, Name: "web"}); err != nil {
		t.Fatal(err)
	}
	if out := e.Out.String(); !strings.HasPrefix(out, "web ready (") || !strings.HasSuffix(out, ", workspace ro "+e.Project+")\n") {
		t.Errorf("stdout %q", out)
	}

	e = cmdtest.NewEnv(t, &enginetest.FakeEngine{})
	e.Fake.ContainerInspectFn = cmdtest.Inspect(e.Sandbox(t, "web", container.StateRunning, func(c *config.Config) { c.Memory *= 2 }))
	err := createRun(context.Background(), &CreateOptions{IO: e.IO, Factory: e.F, Name: "web"})
	var drift *sandbox.DriftError
	if !errors.As(err, &drift) || strings.Join(drift.Keys, ",") != "memory" || errs.ExitCode(err) != errs.CodeFailure ||
		!strings.Contains(errs.Hint(err), "sbx create -n web --replace") || e.Out.Len() != 0 {
		t.Errorf("err %v (exit %d, hint %q), stdout %q", err, errs.ExitCode(err), errs.Hint(err), e.Out)
	}
}
