package config

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sbx-sandbox/sbx/images"
)

// Built-in defaults: the safe posture. A profile layer and the user's layers go on top.
const (
	DefaultUser      = "1000:1000"
	DefaultWorkdir   = "/workspace"
	DefaultTmpfsSize = "256m"
	MinMemory        = 16 << 20
	MinPidsLimit     = 16
	// MaxPool bounds the pool key: every pooled sandbox holds its memory while it waits.
	MaxPool = 64
)

// WorkspaceTarget is where the project root (or the private volume) is mounted.
const WorkspaceTarget = "/workspace"

// InternalDir is reserved for sbx's own files inside a sandbox (such as its exec wrapper).
const InternalDir = "/.sbx"

// Known tools of the tool policy.
const (
	ToolExec    = "exec"
	ToolRead    = "read"
	ToolWrite   = "write"
	ToolBrowser = "browser"
	// ToolApply writes an overlay sandbox's changes onto the host project (the MCP apply
	// tool): the one tool that changes the host, so it is denied by default.
	ToolApply = "apply"
	// ToolPorts lets an agent (MCP forward_port) open a port of the sandbox to this machine;
	// sbx port-forward, which you type yourself, needs exec, as ps and logs do.
	ToolPorts = "ports"
)

// ToolNames lists every operation the tool policy governs.
var ToolNames = []string{ToolExec, ToolRead, ToolWrite, ToolBrowser, ToolApply, ToolPorts}

// DefaultProtectedPaths are what a rw workspace mounts read-only: files and directories in the
// project that the user's own tools on the host read and act on (git's hooks and config, editor
// and agent settings, shell start-up files), after what Claude Code, Anthropic's
// sandbox-runtime and Codex keep agents from writing. Entries under .git/ apply to every
// repository in the project.
var DefaultProtectedPaths = []string{
	ProjectFileName,
	".git/hooks", ".git/config", ".git/config.worktree", ".gitmodules",
	".husky", ".githooks", ".pre-commit-config.yaml", "lefthook.yml", ".lefthook.yml",
	".vscode", ".idea", ".devcontainer", ".claude", ".claude.json", ".mcp.json", ".cursor",
	".envrc", ".gitconfig", ".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile", ".ripgreprc",
}

func builtinDefaults() Config {
	tmpfs := func(path string) Tmpfs {
		return Tmpfs{Path: path, Options: []string{"size=" + DefaultTmpfsSize, "nosuid", "nodev", "noexec"}}
	}
	return Config{
		Mode:             ModeAll,
		Profile:          images.ProfileSandbox,
		Workspace:        WorkspaceRO,
		Workdir:          DefaultWorkdir,
		User:             DefaultUser,
		ReadOnlyRoot:     true,
		Tmpfs:            []Tmpfs{tmpfs("/tmp"), tmpfs("/var/tmp"), tmpfs("/run")},
		Network:          "none",
		CapDrop:          []string{"ALL"},
		CapAdd:           []string{},
		Init:             true,
		Memory:           1 << 30,
		MemorySwap:       1 << 30,
		ShmSize:          64 << 20,
		CPUs:             1.0,
		PidsLimit:        256,
		Ulimits:          map[string]Ulimit{"nofile": {Soft: 4096, Hard: 4096}, "core": {Soft: 0, Hard: 0}},
		Timeout:          10 * time.Minute,
		Evict:            EvictPause,
		Isolation:        IsolationContainer,
		Env:              map[string]string{"LANG": "C.UTF-8"},
		PassEnv:          []string{},
		Binds:            []Bind{},
		Egress:           []string{},
		DNS:              []string{},
		ExtraHosts:       []string{},
		Prune:            Prune{IdleHours: 24, MaxAgeDays: 7},
		Setup:            Setup{Apt: []string{}, Npm: []string{}, Pip: []string{}, Run: []string{}},
		Tools:            Tools{Allow: []string{ToolExec, ToolRead, ToolWrite}, Deny: []string{ToolBrowser, ToolApply, ToolPorts}},
		ProtectedPaths:   slices.Clone(DefaultProtectedPaths),
		WorkspaceExclude: []string{},
		Limits:           Limits{Memory: 8 << 30, CPUs: 4, PidsLimit: 4096, TmpfsSize: 1 << 30, Timeout: time.Hour},
	}
}

// Defaults returns the built-in defaults, before any profile.
func Defaults() Config { return builtinDefaults() }

// profileHome is the writable, size-capped home of the toolchain profiles. Their tools run
// binaries they build there (go run, cargo run), so unlike /tmp it allows exec.
const profileHome = "/home/sandbox"

// profiles hold each bundled profile's own defaults, written as a config file so they go
// through the same strict loader and carry the source profile:<name>.
var profiles = map[string]string{
	images.ProfileSandbox: fmt.Sprintf("image: %s\n", images.SandboxTag),
	images.ProfileCommon: fmt.Sprintf(`image: %[1]s
memory: 2g
pidsLimit: 1024
tmpfs:
  - %[2]s:size=1g,uid=1000,gid=1000,mode=0755,exec
env:
  HOME: %[2]s
  XDG_CACHE_HOME: %[2]s/.cache
  GOPATH: %[2]s/go
  GOMODCACHE: %[2]s/go/pkg/mod
  GOCACHE: %[2]s/.cache/go-build
  GOTMPDIR: %[2]s
  GOTOOLCHAIN: local
  CARGO_HOME: %[2]s/.cargo
  CARGO_TARGET_DIR: %[2]s/.cargo/target
  npm_config_cache: %[2]s/.npm
  npm_config_update_notifier: "false"
`, images.CommonTag, profileHome),
	images.ProfileBrowser: fmt.Sprintf(`image: %[1]s
network: bridge
memory: 2g
shmSize: 512m
pidsLimit: 1024
tmpfs:
  - %[2]s:size=512m,uid=1000,gid=1000,mode=0755
env:
  HOME: %[2]s
  XDG_CACHE_HOME: %[2]s/.cache
  XDG_CONFIG_HOME: %[2]s/.config
`, images.BrowserTag, profileHome),
}

// profileEntries returns a profile's layer. The profiles are ours, so a problem in them is a
// bug in sbx and panics in tests rather than reaching users.
func profileEntries(name string) ([]entry, bool) {
	parsed, ok := parsedProfiles[name]
	if !ok {
		return nil, false
	}
	return parsed(), true
}

// parsedProfiles holds each built-in profile parsed once, when first used: sbx ls resolves
// every sandbox's config, and parsing them each time was a quarter of that; a warm exec uses
// one profile. apply copies what it takes from entries.
var parsedProfiles = func() map[string]func() []entry {
	out := map[string]func() []entry{}
	for name, text := range profiles {
		out[name] = sync.OnceValue(func() []entry {
			res := parseFile(Source{Layer: LayerProfile, Name: name}, []byte(text), "")
			if len(res.problems) > 0 {
				panic(fmt.Sprintf("built-in profile %s: %v", name, res.problems[0]))
			}
			return res.entries
		})
	}
	return out
}()
