// Package images embeds the Dockerfiles of sbx's bundled images and names the image each
// profile uses. It imports nothing from Docker, so pkg/config can use the names.
package images

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

// TagFor returns the image tag of a bundled profile and whether the profile exists.
func TagFor(profile string) (string, bool) {
	switch profile {
	case ProfileSandbox:
		return SandboxTag, true
	case ProfileCommon:
		return CommonTag, true
	case ProfileBrowser:
		return BrowserTag, true
	}
	return "", false
}
