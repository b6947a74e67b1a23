package sandbox

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/cacerts"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// A sandbox with caCerts gets one CA bundle: the certificates its image trusts (the first of
// cacerts.SystemBundles the image has, read from the created container before it starts)
// followed by those caCerts names. sbx writes it on the host, in $XDG_STATE_HOME/sbx/ca/NAME,
// which the sandbox sees read-only at cacerts.MountDir, and cacerts.EnvVars point its tools
// there. Nothing in the sandbox can change what its later commands trust, and the agent and
// the engine's exec find the bundle alike, with no work at each command. Only the image's
// certificates and the caCerts ones reach it: not the host's system bundle, whose public CAs
// may differ from the image's.

// maxImageLinks bounds the links followed to an image's bundle (Fedora's is one link away).
const maxImageLinks = 8

// caDirFor is the host directory for the CA bundle of the new sandbox in, "" without caCerts.
func (m *Manager) caDirFor(in SpecInput) (string, error) {
	if in.Config.CACerts == "" {
		return "", nil
	}
	if m.State == nil {
		return "", errs.Failure(fmt.Errorf("sandbox %q: caCerts needs sbx's state directory to keep the CA bundle in", in.Name), "")
	}
	return m.State.DirIn(AreaCA, in.Name), nil
}

// prepareCADir makes in's bundle directory and takes its lock, which the caller holds until
// the bundle is written; nil without caCerts.
func (m *Manager) prepareCADir(ctx context.Context, in SpecInput) (*os.File, error) {
	if in.CADir == "" {
		return nil, nil
	}
	// 0755: the sandbox user, whatever its uid, reads the bundle through the mount.
	if err := mountDir(in.CADir, 0o755); err != nil {
		return nil, errs.Failure(fmt.Errorf("sandbox %q: making the directory of its CA bundle: %w", in.Name, err), "")
	}
	lock, err := flock.Open(ctx, m.State.LockIn(AreaCA, in.Name), true, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errs.Failure(fmt.Errorf("sandbox %q: locking its CA bundle: %w", in.Name, err), "")
	}
	return lock, nil
}

// writeCABundle writes the bundle of in's sandbox, created as the container id: the image's
// CAs, then in.CACerts.
func (m *Manager) writeCABundle(ctx context.Context, id string, in SpecInput) error {
	system, err := m.imageCABundle(ctx, id)
	if err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: reading its image's CA bundle: %w", in.Name, err), "")
	}
	if system == nil {
		m.debugf("sandbox %q: its image has no CA bundle (looked at %v); its tools trust only the caCerts ones", in.Name, cacerts.SystemBundles)
	}
	tmp, err := os.CreateTemp(in.CADir, ".bundle-*")
	if err == nil {
		defer os.Remove(tmp.Name())
		_, err = tmp.Write(cacerts.Bundle(system, in.CACerts))
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		// A rename, so a sandbox that starts meanwhile never sees half a bundle.
		err = os.Rename(tmp.Name(), filepath.Join(in.CADir, cacerts.BundleName))
	}
	if err != nil {
		return errs.Failure(fmt.Errorf("sandbox %q: writing its CA bundle: %w", in.Name, err), "")
	}
	return nil
}

// imageCABundle reads the CA bundle the image of the created container id keeps at the first
// of cacerts.SystemBundles it has, through the links it keeps there; nil when it has none.
// What comes back is the image's to choose, so it is bounded, and cacerts.Bundle keeps only
// its certificates.
func (m *Manager) imageCABundle(ctx context.Context, id string) ([]byte, error) {
	for _, p := range cacerts.SystemBundles {
		for range maxImageLinks {
			data, link, err := m.readImageFile(ctx, id, p)
			if cerrdefs.IsNotFound(err) {
				break
			}
			if err != nil {
				return nil, err
			}
			if link == "" {
				return data, nil
			}
			if !path.IsAbs(link) {
				link = path.Join(path.Dir(p), link)
			}
			p = link
		}
	}
	return nil, nil
}

// errNotFile is what the image keeps at a path instead of a file or a link: as good as nothing.
var errNotFile = cerrdefs.ErrNotFound.WithMessage("not a file")

// readImageFile returns the regular file at p in the container id, or the target of the link
// there.
func (m *Manager) readImageFile(ctx context.Context, id, p string) (data []byte, link string, err error) {
	rc, _, err := m.Engine.CopyFromContainer(ctx, id, p)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", p, err)
	}
	switch hdr.Typeflag {
	case tar.TypeSymlink:
		return nil, hdr.Linkname, nil
	case tar.TypeReg:
	default:
		return nil, "", errNotFile
	}
	data, err = io.ReadAll(io.LimitReader(tr, cacerts.MaxBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", p, err)
	}
	if len(data) > cacerts.MaxBytes {
		return nil, "", fmt.Errorf("%s is larger than %d MiB", p, cacerts.MaxBytes>>20)
	}
	return data, "", nil
}

// checkCABundle makes sure sb's CA bundle is in place before sb starts: it waits for a create
// that is still writing it, and refuses a sandbox whose bundle is gone (its state directory
// was cleared), whose tools would fail every HTTPS connection.
func (m *Manager) checkCABundle(ctx context.Context, sb *Sandbox) error {
	if m.State == nil || !sb.hasCACerts() || config.ValidName(sb.Name) != nil {
		return nil
	}
	if lock, err := flock.Open(ctx, m.State.LockIn(AreaCA, sb.Name), false, true); err == nil {
		lock.Close() // only waited for: the bundle is written once
	} else if ctx.Err() != nil {
		return ctx.Err()
	}
	bundle := filepath.Join(m.State.DirIn(AreaCA, sb.Name), cacerts.BundleName)
	if fi, err := os.Lstat(bundle); err != nil || !fi.Mode().IsRegular() {
		return errs.Failure(fmt.Errorf("sandbox %q: its CA bundle %s is missing", sb.Name, bundle),
			fmt.Sprintf("recreate it with: sbx create -n %s --replace", sb.Name))
	}
	return nil
}
