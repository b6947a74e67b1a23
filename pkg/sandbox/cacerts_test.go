package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sbx-sandbox/sbx/pkg/cacerts/cacertstest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// tarOf is the archive endpoint's answer for one entry.
func tarOf(t *testing.T, hdr *tar.Header, content []byte) io.ReadCloser {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr.Size = int64(len(content))
	if err := tw.WriteHeader(hdr); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return io.NopCloser(&buf)
}

// hasMount reports whether mounts has want, whatever its bind options.
func hasMount(mounts []mount.Mount, want mount.Mount) bool {
	for _, m := range mounts {
		if m.Type == want.Type && m.Source == want.Source && m.Target == want.Target && m.ReadOnly == want.ReadOnly {
			return true
		}
	}
	return false
}

// A sandbox with caCerts gets a bundle of its image's CAs and the caCerts ones, written in
// sbx's state directory and mounted read-only; rm removes it.
func TestCreateWritesTheCABundle(t *testing.T) {
	imageCA, corpCA := cacertstest.CA(t, "image CA"), cacertstest.CA(t, "corp CA")
	in := specInput()
	in.Config.CACerts, in.CACerts = "host", corpCA
	var host *container.HostConfig
	var env, read []string
	created := false
	fake := creatingEngine("new")
	fake.ContainerCreateFn = func(_ context.Context, c *container.Config, h *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
		created, host, env = true, h, c.Env
		return container.CreateResponse{ID: "new"}, nil
	}
	// As Fedora's image: no Debian bundle, a link to where update-ca-trust writes its own.
	fake.CopyFromContainerFn = func(_ context.Context, id, p string) (io.ReadCloser, container.PathStat, error) {
		if !created || id != "new" {
			t.Errorf("read %s of %q before the container was created", p, id)
		}
		read = append(read, p)
		switch p {
		case "/etc/pki/tls/certs/ca-bundle.crt":
			return tarOf(t, &tar.Header{Name: "ca-bundle.crt", Typeflag: tar.TypeSymlink, Linkname: "../../ca-trust/extracted/pem/tls-ca-bundle.pem"}, nil), container.PathStat{}, nil
		case "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem":
			return tarOf(t, &tar.Header{Name: "tls-ca-bundle.pem", Typeflag: tar.TypeReg, Mode: 0o644}, imageCA), container.PathStat{}, nil
		}
		return nil, container.PathStat{}, cerrdefs.ErrNotFound.WithMessage("Could not find the file " + p)
	}
	m := fakeManager(t, fake)
	if _, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{}); err != nil {
		t.Fatal(err)
	}
	if want := "/etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"; strings.Join(read, " ") != want {
		t.Errorf("read %q, want %q", read, want)
	}
	dir := filepath.Join(m.State.Dir, "ca", in.Name)
	bundle, err := os.ReadFile(filepath.Join(dir, "ca-certificates.crt"))
	if err != nil || !bytes.Equal(bundle, append(bytes.Clone(imageCA), corpCA...)) {
		t.Errorf("bundle %q (%v), want the image's CA, then the corp CA", bundle, err)
	}
	for p, want := range map[string]os.FileMode{filepath.Dir(dir): 0o700, dir: 0o755, filepath.Join(dir, "ca-certificates.crt"): 0o644} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	if want := (mount.Mount{Type: mount.TypeBind, Source: dir, Target: "/etc/sbx/ca", ReadOnly: true}); !hasMount(host.Mounts, want) {
		t.Errorf("mounts %+v: want %s read-only at /etc/sbx/ca", host.Mounts, dir)
	}
	if !strings.Contains(strings.Join(env, "\n")+"\n", "SSL_CERT_FILE=/etc/sbx/ca/ca-certificates.crt\n") {
		t.Errorf("env %q", env)
	}

	in.CADir = dir
	fake.ContainerInspectFn = func(context.Context, string) (container.InspectResponse, error) {
		return inspectOf(t, in, container.StateExited), nil
	}
	fake.ContainerRemoveFn = func(context.Context, string, container.RemoveOptions) error { return nil }
	if err := m.Remove(context.Background(), in.Name, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("rm left the CA directory: %v", err)
	}
}

// An image without a bundle gives one of the caCerts CAs alone; one whose bundle is too large
// to be one fails the create and leaves no container.
func TestCreateWithTheImagesBundleMissingOrTooLarge(t *testing.T) {
	corpCA := cacertstest.CA(t, "corp CA")
	for _, tt := range []struct {
		name    string
		content []byte // at the Debian path; nil for none anywhere
		err     string
	}{
		{"none", nil, ""},
		{"too large", make([]byte, 4<<20+1), "is larger than 4 MiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := specInput()
			in.Config.CACerts, in.CACerts = "/certs/corp.pem", corpCA
			removed := ""
			fake := creatingEngine("new")
			fake.CopyFromContainerFn = func(_ context.Context, _, p string) (io.ReadCloser, container.PathStat, error) {
				if tt.content != nil && p == "/etc/ssl/certs/ca-certificates.crt" {
					return tarOf(t, &tar.Header{Name: "ca-certificates.crt", Typeflag: tar.TypeReg}, tt.content), container.PathStat{}, nil
				}
				return nil, container.PathStat{}, cerrdefs.ErrNotFound.WithMessage("Could not find the file " + p)
			}
			fake.ContainerRemoveFn = func(_ context.Context, id string, _ container.RemoveOptions) error { removed = id; return nil }
			m := fakeManager(t, fake)
			_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || errs.ExitCode(err) != errs.CodeFailure || removed != "new" {
					t.Fatalf("got %v (removed %q), want %q and the container removed", err, removed, tt.err)
				}
				if _, err := os.Lstat(filepath.Join(m.State.Dir, "ca", in.Name)); !os.IsNotExist(err) {
					t.Errorf("the CA directory is left: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			bundle, err := os.ReadFile(filepath.Join(m.State.Dir, "ca", in.Name, "ca-certificates.crt"))
			if err != nil || !bytes.Equal(bundle, corpCA) {
				t.Errorf("bundle %q (%v), want the corp CA alone", bundle, err)
			}
		})
	}
}

// A sandbox whose bundle is gone (its state directory cleared) is not started: every HTTPS
// connection in it would fail.
func TestStartRefusesAMissingCABundle(t *testing.T) {
	in := specInput()
	in.Config.CACerts, in.CACerts, in.CADir = "host", cacertstest.CA(t, "corp CA"), "/gone"
	fake := creatingEngine("")
	fake.ContainerInspectFn = func(context.Context, string) (container.InspectResponse, error) {
		return inspectOf(t, in, container.StateExited), nil
	}
	fake.ContainerStartFn = nil // a start fails the test
	_, err := fakeManager(t, fake).Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err == nil || !strings.Contains(err.Error(), "its CA bundle") || !strings.Contains(errs.Hint(err), "sbx create -n app-123456 --replace") {
		t.Fatalf("got %v (hint %q)", err, errs.Hint(err))
	}
}

// An engine that cannot see sbx's state directory (a remote one) refuses the bundle's mount:
// the error says caCerts needs one that can, and nothing is left behind.
func TestCreateWhenTheEngineCannotMountTheCABundle(t *testing.T) {
	in := specInput()
	in.Config.CACerts, in.CACerts = "host", cacertstest.CA(t, "corp CA")
	fake := creatingEngine("")
	fake.ContainerCreateFn = func(_ context.Context, _ *container.Config, h *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
		return container.CreateResponse{}, cerrdefs.ErrInvalidArgument.WithMessage("invalid mount config for type \"bind\": bind source path does not exist: " + h.Mounts[len(h.Mounts)-1].Source)
	}
	m := fakeManager(t, fake)
	_, err := m.Ensure(context.Background(), in, sandbox.EnsureOptions{})
	if err == nil || !strings.Contains(err.Error(), "which holds its CA bundle") || !strings.Contains(errs.Hint(err), "caCerts needs an engine that sees this machine's files") {
		t.Fatalf("got %v (hint %q)", err, errs.Hint(err))
	}
	if _, err := os.Lstat(filepath.Join(m.State.Dir, "ca", in.Name)); !os.IsNotExist(err) {
		t.Errorf("the CA directory is left: %v", err)
	}
}
