package version

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func engineAt(version string, err error) *enginetest.FakeEngine {
	return &enginetest.FakeEngine{ServerVersionFn: func(context.Context) (types.Version, error) {
		return types.Version{Version: version, APIVersion: "1.46", Os: "linux", Arch: "amd64", KernelVersion: "6.1.0"}, err
	}}
}

func TestVersionRun(t *testing.T) {
	e := cmdtest.NewEnv(t, engineAt("27.1.0", nil))
	if err := versionRun(context.Background(), &VersionOptions{IO: e.IO, Engine: e.F.Engine}); err != nil {
		t.Fatal(err)
	}
	want := "Engine:\n  Endpoint:    unix:///fake/docker.sock\n  Version:     27.1.0\n  API version: 1.46 (negotiated 1.41)\n  OS/Arch:     linux/amd64\n  Kernel:      6.1.0\n"
	if out := e.Out.String(); !strings.HasPrefix(out, "Client:\n  Version:") || !strings.HasSuffix(out, want) || e.Err.Len() != 0 {
		t.Errorf("stdout:\n%s\nstderr %q", out, e.Err)
	}

	e.Out.Reset()
	if err := versionRun(context.Background(), &VersionOptions{IO: e.IO, Engine: e.F.Engine, JSON: true}); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(e.Out.Bytes(), &rep); err != nil || rep.Engine == nil || rep.Engine.Version != "27.1.0" ||
		rep.Engine.ClientAPI != "1.41" || rep.EngineError != "" || rep.Client.Version == "" {
		t.Errorf("%v: %s", err, e.Out)
	}
}

// Without an engine the client part still prints, and the command fails with exit 125.
func TestVersionRunWithoutEngine(t *testing.T) {
	e := cmdtest.NewEnv(t, engineAt("", errors.New("unexpected EOF")))
	err := versionRun(context.Background(), &VersionOptions{IO: e.IO, Engine: e.F.Engine})
	if err == nil || err.Error() != "asking the engine at unix:///fake/docker.sock for its version: unexpected EOF" || errs.ExitCode(err) != errs.CodeFailure {
		t.Errorf("err = %v (exit %d)", err, errs.ExitCode(err))
	}
	if out := e.Out.String(); !strings.HasPrefix(out, "Client:\n") || strings.Contains(out, "Engine:") {
		t.Errorf("stdout:\n%s", out)
	}

	e.Out.Reset()
	down := func(context.Context) (engine.Engine, error) {
		return nil, engine.Unreachable(engine.Endpoint{Host: "unix:///x.sock", Source: "DOCKER_HOST"}, errors.New("connection refused"))
	}
	err = versionRun(context.Background(), &VersionOptions{IO: e.IO, Engine: down, JSON: true})
	var rep Report
	if jerr := json.Unmarshal(e.Out.Bytes(), &rep); jerr != nil || rep.Engine != nil || !strings.Contains(rep.EngineError, "cannot reach the Docker engine at unix:///x.sock") {
		t.Errorf("%v: %s", jerr, e.Out)
	}
	if errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(errs.Hint(err), "start the engine") {
		t.Errorf("err = %v, hint %q", err, errs.Hint(err))
	}
}

// --client never dials the engine.
func TestVersionRunClientOnly(t *testing.T) {
	e := cmdtest.NewEnv(t, nil)
	if err := versionRun(context.Background(), &VersionOptions{IO: e.IO, Engine: e.F.Engine, Client: true}); err != nil {
		t.Fatal(err)
	}
	if out := e.Out.String(); !strings.HasPrefix(out, "Client:\n") || strings.Contains(out, "Engine:") {
		t.Errorf("stdout:\n%s", out)
	}
}
