package cmdutil

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/registryauth"
)

// DockerConfigDir is where the Docker client keeps its config: $DOCKER_CONFIG, else ~/.docker.
func DockerConfigDir(f *Factory) string {
	if d := f.Getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	home, _ := f.HomeDir()
	return filepath.Join(home, ".docker")
}

// RegistryAuth returns the user's credentials for a registry from the Docker config, encoded
// for the engine, and where they came from; an imagebuild.Images.Auth.
func RegistryAuth(f *Factory) func(ctx context.Context, registry string) (string, string, error) {
	store := &registryauth.Store{Dir: DockerConfigDir(f), Helper: runCredentialHelper}
	return func(ctx context.Context, registry string) (string, string, error) {
		a, err := store.Lookup(ctx, registry)
		return a.Encode(), a.Source, err
	}
}

// Bounds on a credential helper: it may ask the desktop's keychain, but not forever, and
// what it prints is a small JSON object.
const (
	helperTimeout = 30 * time.Second
	helperOutput  = 64 << 10
)

// runCredentialHelper runs a docker-credential-* program as the docker CLI does: "get", the
// server on standard input, the credentials as JSON on standard output.
func runCredentialHelper(ctx context.Context, program, server string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, helperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, program, "get")
	cmd.Stdin = strings.NewReader(server)
	var out, stderr limitedBuffer
	out.max, stderr.max = helperOutput, 4<<10
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String() + " " + out.String())
		return out.Bytes(), fmt.Errorf("%w: %s", err, SafeLines(msg))
	}
	return out.Bytes(), nil
}

// limitedBuffer keeps the first max bytes written to it and drops the rest.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

var _ io.Writer = (*limitedBuffer)(nil)
