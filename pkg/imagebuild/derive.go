package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// An image derived for setup is built FROM the configured image's ID with images.SetupFiles
// and the setup as lists in the build context. Its tag is DerivedRepo and the hash of its
// inputs (the base's ID, the setup, sbx's setup files), so the same inputs find the image
// built before and changed ones build another; its labels say what it came from.

// DerivedRepo is the repository of every derived image.
const DerivedRepo = "sbx-derived"

// Labels of a derived image, besides LabelManaged.
const (
	LabelDerivedFrom = "dev.sbx.derived-from" // the configured image, as written
	LabelBaseID      = "dev.sbx.base-id"      // the ID it was built on
	LabelSetupHash   = "dev.sbx.setup-hash"   // the hash its tag is made of
	LabelSetup       = "dev.sbx.setup"        // the setup, as JSON
)

// maxSetupLabel bounds the setup kept in LabelSetup; a longer one is cut, its hash stays whole.
const maxSetupLabel = 8 << 10

// DeriveInput is what a derived image is built from.
type DeriveInput struct {
	Base   string // the configured image, as written
	BaseID string // its ID on the engine
	// BaseUser is the base's USER, which the derived image keeps; "" is root.
	BaseUser string
	Setup    config.Setup
	// CACerts are caCerts' certificates (PEM), trusted during the build only.
	CACerts []byte
	// Network is the network RUN steps use, and Proxy the URL of the proxy on it that
	// HTTP(S)_PROXY name; "" for both is the engine's default bridge, unfiltered.
	Network, Proxy string
	Progress       Progress
}

// DerivedTag is the tag of the image derived from baseID with s.
func DerivedTag(baseID string, s config.Setup) string {
	return DerivedRepo + ":" + setupHash(baseID, s)[:20]
}

func setupHash(baseID string, s config.Setup) string {
	h := sha256.New()
	setup, _ := json.Marshal(s)
	fmt.Fprintf(h, "base %s\nsetup %s\n", baseID, setup)
	for _, name := range []string{images.SetupDockerfile, images.SetupScript} {
		data, _ := fs.ReadFile(images.SetupFiles, name)
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Derive builds the image derived from in.Base with in.Setup, unless one with its tag is
// there, and returns its tag.
func (m *Images) Derive(ctx context.Context, in DeriveInput) (string, error) {
	tag := DerivedTag(in.BaseID, in.Setup)
	if _, err := m.Engine.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", errs.Failure(fmt.Errorf("inspecting image %s: %w", tag, err), "")
	}
	in.Progress.notef("building %s: the setup of %s (first use of this setup)\n", tag, in.Base)
	tarball, err := deriveContext(in)
	if err != nil {
		return "", err
	}
	setup, _ := json.Marshal(in.Setup)
	if len(setup) > maxSetupLabel {
		setup = setup[:maxSetupLabel]
	}
	user := in.BaseUser
	if user == "" {
		user = "0"
	}
	args := map[string]*string{"BASE": &in.BaseID, "BASE_USER": &user}
	if in.Proxy != "" {
		noProxy := "localhost,127.0.0.1"
		for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			args[name] = &in.Proxy
		}
		args["NO_PROXY"], args["no_proxy"] = &noProxy, &noProxy
	}
	_, err = m.runBuild(ctx, tarball, build.ImageBuildOptions{
		Tags:       []string{tag},
		Dockerfile: images.SetupDockerfile,
		BuildArgs:  args,
		Labels: map[string]string{LabelManaged: "true", LabelDerivedFrom: in.Base, LabelBaseID: in.BaseID,
			LabelSetupHash: strings.TrimPrefix(tag, DerivedRepo+":"), LabelSetup: string(setup)},
		NetworkMode: in.Network,
		// FROM names the base by ID: nothing is pulled.
		PullParent: false,
	}, "", nil, in.Progress)
	if err != nil {
		var be *BuildError
		if errors.As(err, &be) {
			be.derived = true
		}
		return "", err
	}
	return tag, nil
}

// deriveContext is the build context of a derived image: sbx's setup files, one list a
// package manager, the commands as a script, and the CA certificates.
func deriveContext(in DeriveInput) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte, mode int64) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)),
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	lines := func(l []string) []byte {
		if len(l) == 0 {
			return nil
		}
		return []byte(strings.Join(l, "\n") + "\n")
	}
	files := []struct {
		name string
		data []byte
	}{
		{"apt.txt", lines(in.Setup.Apt)},
		{"npm.txt", lines(in.Setup.Npm)},
		{"pip.txt", lines(in.Setup.Pip)},
		{"run.sh", lines(in.Setup.Run)},
		{"ca.pem", in.CACerts},
	}
	for _, name := range []string{images.SetupDockerfile, images.SetupScript} {
		data, err := fs.ReadFile(images.SetupFiles, name)
		if err != nil {
			return nil, fmt.Errorf("reading bundled %s: %w", name, err)
		}
		if err := add(name, data, 0o644); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := add(f.name, f.data, 0o644); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// DerivedImage is a derived image on the engine. Its JSON field names are those of
// "sbx image ls --json" (derived) and "sbx image prune --json".
type DerivedImage struct {
	Tag     string       `json:"tag"`
	ID      string       `json:"id"`
	From    string       `json:"from"`   // the configured image it was built on
	BaseID  string       `json:"baseId"` // that image's ID at the time
	Setup   config.Setup `json:"setup"`
	Size    int64        `json:"size"`
	Created time.Time    `json:"created,omitzero"`
}

// Derived lists the derived images on the engine, newest first: those with sbx's labels and
// the tag those name. Their labels are read as untrusted text: a setup that does not parse
// shows as empty.
func (m *Images) Derived(ctx context.Context) ([]DerivedImage, error) {
	list, err := m.Engine.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelSetupHash))})
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("listing derived images: %w", err), "")
	}
	var out []DerivedImage
	for _, s := range list {
		// Labels travel with an image anyone built: only sbx tags its own sbx-derived:HASH.
		tag := DerivedRepo + ":" + s.Labels[LabelSetupHash]
		if s.Labels[LabelManaged] != "true" || !slices.Contains(s.RepoTags, tag) {
			continue
		}
		d := DerivedImage{Tag: tag, ID: s.ID, From: s.Labels[LabelDerivedFrom], BaseID: s.Labels[LabelBaseID], Size: s.Size, Created: time.Unix(s.Created, 0).UTC()}
		_ = json.Unmarshal([]byte(s.Labels[LabelSetup]), &d.Setup)
		out = append(out, d)
	}
	slices.SortStableFunc(out, func(a, b DerivedImage) int { return b.Created.Compare(a.Created) })
	return out, nil
}

// PruneResult is what PruneDerived did to one image.
type PruneResult struct {
	DerivedImage
	Removed bool   `json:"removed"`
	Reason  string `json:"reason,omitempty"` // why it stays
}

// PruneDerived removes the derived images no container uses, running or not; the engine
// refuses to remove one a container uses, and that refusal is what keeps it.
func (m *Images) PruneDerived(ctx context.Context) ([]PruneResult, error) {
	list, err := m.Derived(ctx)
	if err != nil {
		return nil, err
	}
	var out []PruneResult
	for _, d := range list {
		r := PruneResult{DerivedImage: d}
		_, err := m.Engine.ImageRemove(ctx, d.ID, image.RemoveOptions{PruneChildren: true})
		switch {
		case err == nil, cerrdefs.IsNotFound(err):
			r.Removed = true
		case ctx.Err() != nil:
			return out, ctx.Err()
		case cerrdefs.IsConflict(err):
			// The engine says which container uses it, or that it has other tags.
			r.Reason = err.Error()
		default:
			return out, errs.Failure(fmt.Errorf("removing image %s: %w", ShortID(d.ID), err), "")
		}
		out = append(out, r)
	}
	return out, nil
}
