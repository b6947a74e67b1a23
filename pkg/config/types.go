// Package config resolves sbx's configuration from its layers (built-in defaults, profile,
// user file, project file, --config file, environment, flags), remembers where every value
// came from, and refuses dangerous settings. It never imports Docker.
package config

import "time"

// Config is the fully resolved configuration of one sandbox. Sizes are bytes.
type Config struct {
	Mode            string            `json:"mode"`      // all | non-main | off
	Profile         string            `json:"profile"`   // sandbox | common | browser
	Image           string            `json:"image"`     // from the profile unless set
	Workspace       string            `json:"workspace"` // none | ro | rw
	Workdir         string            `json:"workdir"`
	User            string            `json:"user"` // uid:gid
	ReadOnlyRoot    bool              `json:"readOnlyRoot"`
	Tmpfs           []Tmpfs           `json:"tmpfs"`
	Network         string            `json:"network"`
	CapDrop         []string          `json:"capDrop"`
	CapAdd          []string          `json:"capAdd"`
	Init            bool              `json:"init"`
	Memory          int64             `json:"memory"`
	MemorySwap      int64             `json:"memorySwap"`
	ShmSize         int64             `json:"shmSize"` // size of /dev/shm
	CPUs            float64           `json:"cpus"`
	PidsLimit       int64             `json:"pidsLimit"`
	Ulimits         map[string]Ulimit `json:"ulimits"`
	Timeout         time.Duration     `json:"timeout"`
	IdleStop        time.Duration     `json:"idleStop"`   // 0 = never
	MaxRunning      int               `json:"maxRunning"` // 0 = no cap
	Evict           string            `json:"evict"`      // pause | stop
	Pool            int               `json:"pool"`       // started, unclaimed sandboxes kept ready; 0 = none
	Env             map[string]string `json:"env"`
	PassEnv         []string          `json:"passEnv"`
	Binds           []Bind            `json:"binds"`
	SeccompProfile  string            `json:"seccompProfile"`  // "" = sbx's built-in profile, else a file path
	ApparmorProfile string            `json:"apparmorProfile"` // "" = engine default
	Isolation       string            `json:"isolation"`       // container | gvisor
	Runtime         string            `json:"runtime"`         // "" = engine default
	CACerts         string            `json:"caCerts"`         // "" = none, "host", else an absolute path
	Egress          []string          `json:"egress"`          // destinations and presets the proxy allows; empty = no proxy
	DNS             []string          `json:"dns"`
	ExtraHosts      []string          `json:"extraHosts"`
	Prune           Prune             `json:"prune"`
	Setup           Setup             `json:"setup"`
	Tools           Tools             `json:"tools"`
	// ProtectedPaths are project paths mounted read-only over a rw workspace.
	ProtectedPaths []string `json:"protectedPaths"`
	// WorkspaceExclude are .gitignore-style patterns of project paths left out of a workspace
	// carried to an engine that cannot see the project.
	WorkspaceExclude []string `json:"workspaceExclude"`
	// Limits are the ceilings for values an untrusted project file may set.
	Limits Limits `json:"limits"`

	DangerouslyAllowExternalBindSources    bool `json:"dangerouslyAllowExternalBindSources"`
	DangerouslyAllowReservedTargets        bool `json:"dangerouslyAllowReservedTargets"`
	DangerouslyAllowContainerNamespaceJoin bool `json:"dangerouslyAllowContainerNamespaceJoin"`
	DangerouslyAllowUnenforcedLimits       bool `json:"dangerouslyAllowUnenforcedLimits"`
}

// Tmpfs is one tmpfs mount; Options are mount options such as size=256m,nosuid,nodev,noexec.
type Tmpfs struct {
	Path    string   `json:"path"`
	Options []string `json:"options"`
}

// Ulimit is a soft:hard pair.
type Ulimit struct {
	Soft int64 `json:"soft"`
	Hard int64 `json:"hard"`
}

// Bind is a host path mounted into the sandbox. Source is the canonical (symlink-free) path.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

// Prune holds the expiry rules of "sbx prune"; 0 disables a rule.
type Prune struct {
	IdleHours  int `json:"idleHours"`
	MaxAgeDays int `json:"maxAgeDays"`
}

// Limits are the highest resource values an untrusted project file may ask for; above them a
// value loosens the sandbox and needs the file to be trusted.
type Limits struct {
	Memory    int64         `json:"memory"`
	CPUs      float64       `json:"cpus"`
	PidsLimit int64         `json:"pidsLimit"`
	TmpfsSize int64         `json:"tmpfsSize"`
	Timeout   time.Duration `json:"timeout"`
}

// Setup is what sbx installs into an image derived from the configured one, at build time,
// as root: Debian packages, then npm and pip packages, then the commands.
type Setup struct {
	Apt []string `json:"apt"`
	Npm []string `json:"npm"`
	Pip []string `json:"pip"`
	Run []string `json:"run"`
}

// Empty reports whether there is nothing to set up, so the configured image runs as it is.
func (s Setup) Empty() bool { return len(s.Apt)+len(s.Npm)+len(s.Pip)+len(s.Run) == 0 }

// Tools is the tool policy: deny wins, a non-empty allow list blocks what it does not match.
type Tools struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}
