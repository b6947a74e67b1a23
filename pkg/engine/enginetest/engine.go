// Package enginetest gives tests a real engine (or a clear skip) and a fake one.
package enginetest

import (
	"context"
	"os"
	"testing"

	"github.com/sbx-sandbox/sbx/internal/testenv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sbx-sandbox/sbx/pkg/engine"
)

// TestLabel marks every container, volume and image a test creates, so a sweep can find leftovers.
const TestLabel = "sbx.test"

// RealEngine connects to the engine the environment points at. Without one, the test is
// skipped, unless SBX_REQUIRE_DOCKER=1 (as in CI), where it fails.
func RealEngine(t testing.TB) engine.Engine {
	t.Helper()
	home, _ := os.UserHomeDir()
	ep, err := engine.ResolveEndpoint(os.Getenv, home, "")
	if err == nil {
		var cli engine.Engine
		cli, err = engine.Connect(context.Background(), ep, nil)
		if err == nil {
			t.Cleanup(func() { _ = cli.Close() })
			return cli
		}
	}
	testenv.Missing(t, "SBX_REQUIRE_DOCKER", "no Docker engine answers: %v", err)
	return nil
}

// Sweep removes every container carrying TestLabel=run, for use in TestMain or t.Cleanup.
func Sweep(ctx context.Context, eng engine.Engine, run string) error {
	list, err := eng.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", TestLabel+"="+run))})
	if err != nil {
		return err
	}
	for _, c := range list {
		if err := eng.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			return err
		}
	}
	return nil
}
