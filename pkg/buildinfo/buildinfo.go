// Package buildinfo reports the version sbx was built as.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Version and Commit are set with -ldflags "-X" by make build; otherwise they come from the
// module build information.
var (
	Version = ""
	Commit  = ""
)

// Info describes this binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build information of the running binary. It is read once: commands such as
// ls ask for it per sandbox.
var Get = sync.OnceValue(get)

func get() Info {
	info := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	// make build sets both; reading the module's build info costs every start of sbx.
	if info.Version == "" || info.Commit == "" {
		info = fromModule(info)
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// fromModule fills what the linker did not set from the module's build info: go install
// records the module's version and, in a checkout, its commit.
func fromModule(info Info) Info {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.Commit == "" {
				info.Commit = s.Value
			}
		}
	}
	return info
}
