package sandbox

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
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// The containers sbx runs for its own work (the egress proxy, emptying overlayfs's work
// directory) run sbx's own binary, bound read-only at helperBinary, on sbx's own image: one
// layer of empty directories that sbx writes itself, so nothing of any other image (its
// binaries, PATH, environment, healthcheck) reaches them.
const (
	// HelperImage is that image's tag; sbx checks its layer before every use.
	HelperImage = "sbx-helper:1"
	// helperBinary is where a helper container sees this sbx's binary.
	helperBinary = "/usr/local/libexec/sbx"
	roleHelper   = "helper"
)

// helperLayer is the helper image's one layer: a tar of the directories its containers need,
// the same bytes every time, so its digest (the layer's DiffID) is known.
func helperLayer() []byte {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, d := range []struct {
		name string
		mode int64
	}{{"etc/", 0o755}, {"tmp/", 0o1777}, {"usr/", 0o755}, {"usr/local/", 0o755}, {"usr/local/libexec/", 0o755}} {
		_ = w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX})
	}
	_ = w.Close()
	return b.Bytes()
}

// helperLayerID is the DiffID of layer, as the engine reports it.
func helperLayerID(layer []byte) string {
	sum := sha256.Sum256(layer)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// hostDirMount mounts the host directory source at target in a helper container nosuid,
// nodev and noexec: through the local volume driver's bind, which takes mount options (a
// plain bind cannot). The volume is the container's own: removing the container with its
// volumes removes it, never the directory.
func hostDirMount(source, target string) mount.Mount {
	return mount.Mount{Type: mount.TypeVolume, Target: target, VolumeOptions: &mount.VolumeOptions{DriverConfig: &mount.Driver{Name: "local",
		Options: map[string]string{"type": "none", "device": source, "o": "bind,nosuid,nodev,noexec"}}}}
}

// helperSpec is what every helper container shares: sbx's image and binary, the
// entrypoint given as an absolute path, no environment but what is given, no healthcheck.
func helperSpec(cfg *container.Config) *container.Config {
	cfg.Image = HelperImage
	cfg.Entrypoint = []string{helperBinary}
	cfg.Healthcheck = &container.HealthConfig{Test: []string{"NONE"}}
	cfg.WorkingDir = "/"
	if cfg.Env == nil {
		cfg.Env = []string{}
	}
	return cfg
}

// ensureHelperImage makes HelperImage from helperLayer unless the engine has it with exactly
// that layer: an image someone else tagged so is replaced, never used.
func (m *Manager) ensureHelperImage(ctx context.Context) error {
	layer := helperLayer()
	want := []string{helperLayerID(layer)}
	ok := func() (bool, error) {
		info, err := m.Engine.ImageInspect(ctx, HelperImage)
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, errs.Engine("inspecting sbx's helper image", err)
		}
		return slices.Equal(info.RootFS.Layers, want) && (info.Config == nil || info.Config.Healthcheck == nil && len(info.Config.Entrypoint) == 0 && len(info.Config.OnBuild) == 0), nil
	}
	if good, err := ok(); good || err != nil {
		return err
	}
	rc, err := m.Engine.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(layer), SourceName: "-"}, HelperImage,
		image.ImportOptions{Changes: []string{"LABEL " + LabelManaged + "=true " + LabelRole + "=" + roleHelper}})
	if err != nil {
		return errs.Engine("making sbx's helper image", err)
	}
	defer rc.Close()
	dec := json.NewDecoder(io.LimitReader(rc, 1<<20))
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return errs.Engine("making sbx's helper image", err)
		}
		if msg.Error != "" {
			return errs.Engine("making sbx's helper image", errors.New(msg.Error))
		}
	}
	if good, err := ok(); err != nil || !good {
		return errs.Failure(fmt.Errorf("sbx's helper image %s does not hold the layer sbx made (%v): sbx will not run its own work on it", HelperImage, err), "")
	}
	return nil
}
