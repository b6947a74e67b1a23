// Package images embeds the Dockerfiles of sbx's bundled images and names the image each
// profile uses. It imports nothing from Docker, so pkg/config can use the names.
package images

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strconv"
)

// Profile names.
const (
	ProfileSandbox = "sandbox"
	ProfileCommon  = "common"
	ProfileBrowser = "browser"
)

// Image tags of the bundled profiles.
const (
	SandboxTag = "sbx-sandbox:bookworm-slim"
	CommonTag  = "sbx-sandbox-common:bookworm-slim"
	BrowserTag = "sbx-sandbox-browser:bookworm-slim"
)

// Profiles lists every bundled profile in build order (a profile's base comes first).
var Profiles = []string{ProfileSandbox, ProfileCommon, ProfileBrowser}

// Files holds the bundled Dockerfiles and the files they copy, at the root.
//
//go:embed Dockerfile.sandbox Dockerfile.sandbox-common Dockerfile.sandbox-browser sbx-browser-entrypoint.sh
var Files embed.FS

// SetupFiles holds what an image derived for setup is built from: its Dockerfile and the
// script that installs the setup (pkg/imagebuild, derive.go).
//
//go:embed Dockerfile.setup sbx-setup.sh
var SetupFiles embed.FS

// Files of SetupFiles.
const (
	SetupDockerfile = "Dockerfile.setup"
	SetupScript     = "sbx-setup.sh"
)

// File is one file of a build context.
type File struct {
	Name string      // path in Files and in the build context
	Mode fs.FileMode // embed drops permission bits, so they are declared here
}

type profile struct {
	tag   string
	base  string // profile whose image this one builds FROM (its BASE_IMAGE), or ""
	files []File // the Dockerfile first
}

var profiles = map[string]profile{
	ProfileSandbox: {tag: SandboxTag, files: []File{{"Dockerfile.sandbox", 0o644}}},
	ProfileCommon:  {tag: CommonTag, base: ProfileSandbox, files: []File{{"Dockerfile.sandbox-common", 0o644}}},
	ProfileBrowser: {tag: BrowserTag, base: ProfileSandbox, files: []File{
		{"Dockerfile.sandbox-browser", 0o644},
		{"sbx-browser-entrypoint.sh", 0o755},
	}},
}

// TagFor returns the image tag of a bundled profile and whether the profile exists.
func TagFor(profile string) (string, bool) {
	p, ok := profiles[profile]
	return p.tag, ok
}

// ProfileFor returns the bundled profile whose image is tag, and whether there is one.
func ProfileFor(tag string) (string, bool) {
	for name, p := range profiles {
		if p.tag == tag {
			return name, true
		}
	}
	return "", false
}

// BaseOf returns the profile whose image profile is built FROM, or "" for the root image.
func BaseOf(profile string) string { return profiles[profile].base }

// ContextFiles returns the files of a profile's build context, its Dockerfile first, or nil
// for a profile that is not bundled.
func ContextFiles(profile string) []File { return profiles[profile].files }

// Hash is the dockerfile-hash label an image of profile built from fsys carries: a SHA-256
// over its build context's names, modes and contents, and over its base's hash, so a
// change to Dockerfile.sandbox makes the images built on it stale too.
func Hash(fsys fs.FS, profile string) (string, error) {
	p, ok := profiles[profile]
	if !ok {
		return "", fmt.Errorf("no bundled profile %q", profile)
	}
	h := sha256.New()
	if p.base != "" {
		base, err := Hash(fsys, p.base)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "base %s\n", base)
	}
	for _, f := range p.files {
		data, err := fs.ReadFile(fsys, f.Name)
		if err != nil {
			return "", fmt.Errorf("reading bundled %s: %w", f.Name, err)
		}
		// Length-prefixed, so no two different contexts write the same bytes.
		fmt.Fprintf(h, "file %s %o %s\n", strconv.Quote(f.Name), f.Mode.Perm(), strconv.Itoa(len(data)))
		h.Write(data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ToolboxFiles holds the Dockerfile of sbx's toolbox: static bash and busybox from Debian's
// packages, which sbx mounts into sandboxes on images it does not bundle (pkg/sandbox,
// toolbox.go).
//
//go:embed Dockerfile.toolbox
var ToolboxFiles embed.FS

// The toolbox image's Dockerfile and repository; its tag is ToolboxTag.
const (
	ToolboxDockerfile = "Dockerfile.toolbox"
	ToolboxRepo       = "sbx-toolbox"
)

// ToolboxHash is the SHA-256 of the toolbox's Dockerfile, in hex: the name of its image's tag
// and of its copy in sbx's state directory, so a changed Dockerfile gives a new toolbox.
func ToolboxHash() string {
	data, _ := fs.ReadFile(ToolboxFiles, ToolboxDockerfile)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ToolboxTag is the tag of the toolbox image built from ToolboxFiles.
func ToolboxTag() string { return ToolboxRepo + ":" + ToolboxHash()[:20] }
