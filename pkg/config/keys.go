package config

import (
	"slices"
	"strings"
)

// kind is how a key's value is written and merged.
type kind int

const (
	kString   kind = iota
	kBool          // true | false
	kInt           // a whole number
	kFloat         // a decimal number
	kSize          // 512m, 2g, or bytes
	kDuration      // 30s, 10m, 1h; 0 = none
	kStrings       // a list of strings; a higher layer replaces it
	kEnv           // NAME: value; layers merge by name
	kUlimits       // name: soft:hard; a higher layer replaces it
	kTmpfs         // PATH:OPTIONS entries; layers concatenate
	kBinds         // HOST:CONTAINER[:ro] entries; layers concatenate
)

// keyDef describes one configuration key: how it is written, where it lives in Config, and
// what it means. The registry below is the single list that strict loading, the environment
// layer, explain, the JSON schema and the init template are all generated from.
type keyDef struct {
	name  string   // key path: "memory", "prune.idleHours"
	kind  kind     //
	env   string   // SBX_ variable for scalar keys; "" when it cannot come from the environment
	enum  []string // the accepted values, when they are a closed set
	doc   string   // one-line description
	field func(c *Config) any
	// defDoc describes the default where the value itself would mislead ("from profile").
	defDoc string
	// rows makes explain show a list one element a row, as it is too long for one.
	rows bool
}

var registry = []*keyDef{
	{name: "mode", kind: kString, env: "SBX_MODE", enum: []string{ModeAll, ModeNonMain, ModeOff},
		doc:   "where execs run: all = every exec sandboxed; non-main = the default sandbox's execs run on the host; off = every exec on the host",
		field: func(c *Config) any { return &c.Mode }},
	{name: "profile", kind: kString, env: "SBX_PROFILE", enum: []string{"sandbox", "common", "browser"},
		doc:   "bundled image and its settings: sandbox (python, git), common (node, go, rust, java), browser (chromium)",
		field: func(c *Config) any { return &c.Profile }},
	{name: "image", kind: kString, env: "SBX_IMAGE", defDoc: "from the profile",
		doc:   "image to run; explain warns when it is not one of sbx's bundled images",
		field: func(c *Config) any { return &c.Image }},
	{name: "workspace", kind: kString, env: "SBX_WORKSPACE", enum: []string{WorkspaceNone, WorkspaceRO, WorkspaceRW, WorkspaceOverlay},
		doc:   "project root at /workspace: none = a private volume, ro = read-only bind, rw = read-write bind, overlay = writable, changes kept apart until sbx apply",
		field: func(c *Config) any { return &c.Workspace }},
	{name: "workdir", kind: kString, env: "SBX_WORKDIR",
		doc:   "absolute working directory inside the sandbox",
		field: func(c *Config) any { return &c.Workdir }},
	{name: "user", kind: kString, env: "SBX_USER",
		doc:    "numeric uid:gid inside the sandbox; root only when set explicitly",
		defDoc: "1000:1000; in rw mode the owner of the project root",
		field:  func(c *Config) any { return &c.User }},
	{name: "readOnlyRoot", kind: kBool, env: "SBX_READ_ONLY_ROOT",
		doc:   "mount the image's root file system read-only",
		field: func(c *Config) any { return &c.ReadOnlyRoot }},
	{name: "tmpfs", kind: kTmpfs,
		doc:   "scratch mounts as PATH:OPTIONS; layers add to the list, a later entry for the same path replaces it; suid is refused",
		field: func(c *Config) any { return &c.Tmpfs }},
	{name: "network", kind: kString, env: "SBX_NETWORK",
		doc:   "none, bridge or a user-defined network; host is refused, container:<x> needs dangerouslyAllowContainerNamespaceJoin",
		field: func(c *Config) any { return &c.Network }},
	{name: "capDrop", kind: kStrings,
		doc:   "capabilities to drop; must include ALL",
		field: func(c *Config) any { return &c.CapDrop }},
	{name: "capAdd", kind: kStrings,
		doc:   "capabilities to add back; only NET_BIND_SERVICE is accepted",
		field: func(c *Config) any { return &c.CapAdd }},
	{name: "init", kind: kBool, env: "SBX_INIT",
		doc:   "run an init process that reaps zombies (without it a fork bomb leaves the sandbox unusable)",
		field: func(c *Config) any { return &c.Init }},
	{name: "memory", kind: kSize, env: "SBX_MEMORY",
		doc:   "memory limit such as 512m or 2g; at least 16m",
		field: func(c *Config) any { return &c.Memory }},
	{name: "memorySwap", kind: kSize, env: "SBX_MEMORY_SWAP", defDoc: "same as memory: no swap",
		doc:   "memory plus swap limit; equal to memory means no swap",
		field: func(c *Config) any { return &c.MemorySwap }},
	{name: "shmSize", kind: kSize, env: "SBX_SHM_SIZE",
		doc:   "size of /dev/shm",
		field: func(c *Config) any { return &c.ShmSize }},
	{name: "cpus", kind: kFloat, env: "SBX_CPUS",
		doc:   "CPU limit; more than 0 and at most the host's CPUs",
		field: func(c *Config) any { return &c.CPUs }},
	{name: "pidsLimit", kind: kInt, env: "SBX_PIDS_LIMIT",
		doc:   "maximum number of processes and threads; at least 16",
		field: func(c *Config) any { return &c.PidsLimit }},
	{name: "ulimits", kind: kUlimits,
		doc:   "resource limits as name: soft:hard; a higher layer replaces the whole map",
		field: func(c *Config) any { return &c.Ulimits }},
	{name: "timeout", kind: kDuration, env: "SBX_TIMEOUT",
		doc:   "default time limit of each exec such as 30s or 10m; 0 means none",
		field: func(c *Config) any { return &c.Timeout }},
	{name: "idleStop", kind: kDuration, env: "SBX_IDLE_STOP",
		doc:   "stop the sandbox once nothing ran in it for this long (no command, background process, shell session, copy or port forward) such as 15m; the next command starts it again; 0 means never",
		field: func(c *Config) any { return &c.IdleStop }},
	{name: "maxRunning", kind: kInt, env: "SBX_MAX_RUNNING",
		doc:   "at most this many of your sandboxes run at once on the engine; starting one more first evicts the least recently used one without a command in flight; 0 = no cap",
		field: func(c *Config) any { return &c.MaxRunning }},
	{name: "evict", kind: kString, env: "SBX_EVICT", enum: []string{EvictPause, EvictStop},
		doc:   "how maxRunning evicts a sandbox: pause keeps its processes and memory (resumed on next use), stop ends them and frees the memory",
		field: func(c *Config) any { return &c.Evict }},
	{name: "pool", kind: kInt, env: "SBX_POOL",
		doc:   "keep this many sandboxes of this configuration started and unclaimed, so a new one (exec -n NEW, exec --rm, create) starts at once; only for workspace none without binds, egress, caCerts or published ports; they count against maxRunning; 0 = no pool",
		field: func(c *Config) any { return &c.Pool }},
	{name: "env", kind: kEnv,
		doc:   "environment set on the sandbox; layers merge by name; secret-looking names are refused (use passEnv)",
		field: func(c *Config) any { return &c.Env }},
	{name: "passEnv", kind: kStrings,
		doc:   "host variables passed to each exec, never stored on the sandbox; nothing else from the host is passed",
		field: func(c *Config) any { return &c.PassEnv }},
	{name: "binds", kind: kBinds,
		doc:   "host paths as HOST:CONTAINER[:ro|:rw]; the host path must be absolute and inside the project; layers add to the list",
		field: func(c *Config) any { return &c.Binds }},
	{name: "seccompProfile", kind: kString, env: "SBX_SECCOMP_PROFILE", defDoc: "sbx's built-in profile (moby's current default, whatever the engine)",
		doc:   "absolute path of a seccomp profile (JSON); unconfined is refused",
		field: func(c *Config) any { return &c.SeccompProfile }},
	{name: "apparmorProfile", kind: kString, env: "SBX_APPARMOR_PROFILE", defDoc: "the engine's default profile",
		doc:   "AppArmor profile name; unconfined is refused",
		field: func(c *Config) any { return &c.ApparmorProfile }},
	{name: "isolation", kind: kString, env: "SBX_ISOLATION", enum: []string{IsolationContainer, IsolationGVisor},
		doc:   "the kernel boundary: container = the host's kernel behind namespaces, seccomp and dropped capabilities; gvisor = also gVisor's user-space kernel (the runsc-sbx runtime), which only tightens",
		field: func(c *Config) any { return &c.Isolation }},
	{name: "runtime", kind: kString, env: "SBX_RUNTIME", defDoc: "the engine's default runtime",
		doc:   "OCI runtime registered with the engine, for runtimes other than gVisor (isolation: gvisor picks its own); empty = the engine's default",
		field: func(c *Config) any { return &c.Runtime }},
	{name: "caCerts", kind: kString, env: "SBX_CA_CERTS", defDoc: "none: only the image's own CAs",
		doc:   "extra CA certificates the sandbox's tools trust: a PEM file, a directory of *.crt and *.pem files, or host (the CAs added to this machine's system store); a relative path starts at the directory of the file that sets it",
		field: func(c *Config) any { return &c.CACerts }},
	{name: "egress", kind: kStrings, rows: true,
		doc:   "destinations the sandbox may reach through sbx's filtering proxy: names (pypi.org, *.pythonhosted.org, github.com:22; a name alone means ports 80 and 443), addresses and networks (10.1.2.3:5432, 10.0.0.0/8) and presets (@debian, @python, @node, @go, @github, @rust); needs network none; a higher layer replaces the list",
		field: func(c *Config) any { return &c.Egress }},
	{name: "dns", kind: kStrings,
		doc:   "DNS server addresses",
		field: func(c *Config) any { return &c.DNS }},
	{name: "extraHosts", kind: kStrings,
		doc:   "extra /etc/hosts entries as NAME:IP",
		field: func(c *Config) any { return &c.ExtraHosts }},
	{name: "prune.idleHours", kind: kInt, env: "SBX_PRUNE_IDLE_HOURS",
		doc:   "sbx prune removes sandboxes idle this many hours; 0 disables",
		field: func(c *Config) any { return &c.Prune.IdleHours }},
	{name: "prune.maxAgeDays", kind: kInt, env: "SBX_PRUNE_MAX_AGE_DAYS",
		doc:   "sbx prune removes sandboxes older than this many days; 0 disables",
		field: func(c *Config) any { return &c.Prune.MaxAgeDays }},
	{name: "setup.apt", kind: kStrings,
		doc:   "Debian packages installed with apt-get into an image derived from image (built once, as root, network through egress and @debian)",
		field: func(c *Config) any { return &c.Setup.Apt }},
	{name: "setup.npm", kind: kStrings,
		doc:   "npm packages installed globally into the derived image (the image needs npm; network through egress and @node)",
		field: func(c *Config) any { return &c.Setup.Npm }},
	{name: "setup.pip", kind: kStrings,
		doc:   "pip packages installed into the derived image (the image needs pip or python3 -m pip; network through egress and @python)",
		field: func(c *Config) any { return &c.Setup.Pip }},
	{name: "setup.run", kind: kStrings, rows: true,
		doc:   "shell commands run as root with sh -e in the derived image's build, after the packages; network through egress",
		field: func(c *Config) any { return &c.Setup.Run }},
	{name: "tools.allow", kind: kStrings,
		doc:   "tools (exec, read, write, browser, apply) allowed, * globs; a non-empty list blocks what it does not match",
		field: func(c *Config) any { return &c.Tools.Allow }},
	{name: "tools.deny", kind: kStrings,
		doc:   "tools denied, * globs; deny wins over allow",
		field: func(c *Config) any { return &c.Tools.Deny }},
	{name: "protectedPaths", kind: kStrings, rows: true,
		doc:   "in a rw workspace, project paths (relative to its root) mounted read-only because tools on the host obey them; entries under .git/ apply to every repository in the project; an untrusted project file can only add to the list",
		field: func(c *Config) any { return &c.ProtectedPaths }},
	{name: "workspaceExclude", kind: kStrings, rows: true,
		doc:   "on an engine that cannot see the project (a remote one), .gitignore-style patterns of project paths not copied into the sandbox; an untrusted project file can only add to the list",
		field: func(c *Config) any { return &c.WorkspaceExclude }},
	{name: "limits.memory", kind: kSize, env: "SBX_LIMITS_MEMORY", defDoc: "8g, at most this machine's memory",
		doc:   "the most memory (and /dev/shm) an untrusted project file may ask for",
		field: func(c *Config) any { return &c.Limits.Memory }},
	{name: "limits.cpus", kind: kFloat, env: "SBX_LIMITS_CPUS", defDoc: "4, at most this machine's CPUs",
		doc:   "the most CPUs an untrusted project file may ask for",
		field: func(c *Config) any { return &c.Limits.CPUs }},
	{name: "limits.pidsLimit", kind: kInt, env: "SBX_LIMITS_PIDS_LIMIT",
		doc:   "the highest pidsLimit an untrusted project file may ask for",
		field: func(c *Config) any { return &c.Limits.PidsLimit }},
	{name: "limits.tmpfsSize", kind: kSize, env: "SBX_LIMITS_TMPFS_SIZE",
		doc:   "the largest size of one tmpfs mount an untrusted project file may ask for",
		field: func(c *Config) any { return &c.Limits.TmpfsSize }},
	{name: "limits.timeout", kind: kDuration, env: "SBX_LIMITS_TIMEOUT",
		doc:   "the longest timeout an untrusted project file may ask for (it may never ask for 0, no timeout)",
		field: func(c *Config) any { return &c.Limits.Timeout }},
	{name: "dangerouslyAllowExternalBindSources", kind: kBool,
		doc:   "break-glass (files only): allow bind sources outside the project root",
		field: func(c *Config) any { return &c.DangerouslyAllowExternalBindSources }},
	{name: "dangerouslyAllowReservedTargets", kind: kBool,
		doc:   "break-glass (files only): allow bind targets at or under /workspace and sbx's own paths",
		field: func(c *Config) any { return &c.DangerouslyAllowReservedTargets }},
	{name: "dangerouslyAllowContainerNamespaceJoin", kind: kBool,
		doc:   "break-glass (files only): allow network container:<name>, sharing another container's network",
		field: func(c *Config) any { return &c.DangerouslyAllowContainerNamespaceJoin }},
	{name: "dangerouslyAllowUnenforcedLimits", kind: kBool,
		doc:   "break-glass (files only): create sandboxes on an engine that does not apply their memory, CPU and pids limits",
		field: func(c *Config) any { return &c.DangerouslyAllowUnenforcedLimits }},
}

// sectionKey holds per-sandbox overrides in a file: sandboxes: {NAME: {...}}.
const sectionKey = "sandboxes"

// Mode values.
const (
	ModeAll     = "all"
	ModeNonMain = "non-main"
	ModeOff     = "off"
)

// Evict values: how maxRunning makes room.
const (
	EvictPause = "pause"
	EvictStop  = "stop"
)

// Isolation values: the kernel boundary between the sandbox and the host.
const (
	IsolationContainer = "container"
	IsolationGVisor    = "gvisor"
)

// GVisorRuntime is the engine runtime isolation: gvisor runs sandboxes under: runsc registered
// with the flags sbx needs (the ptrace platform, the sandbox's own network namespace, sbx's
// seccomp filter applied inside gVisor too, host sockets its agent can make), so a plain
// runsc registration cannot be mistaken for it.
const GVisorRuntime = "runsc-sbx"

// EngineRuntime is the runtime the engine runs the sandbox under; "" is the engine's default.
func (c Config) EngineRuntime() string {
	if c.Isolation == IsolationGVisor {
		return GVisorRuntime
	}
	return c.Runtime
}

// Workspace values.
const (
	WorkspaceNone = "none"
	WorkspaceRO   = "ro"
	WorkspaceRW   = "rw"
	// WorkspaceOverlay shows the project writable, with every change kept in a layer of the
	// sandbox's own on the host; the project changes only through sbx apply.
	WorkspaceOverlay = "overlay"
)

func lookupKey(name string) *keyDef {
	for _, k := range registry {
		if k.name == name {
			return k
		}
	}
	return nil
}

// groupOf returns "prune" for "prune.idleHours" and "" for a top-level key.
func groupOf(name string) string {
	g, _, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	return g
}

// childNames returns the names a mapping at prefix ("" for the top, "prune" for prune.*)
// accepts, as written in YAML.
func childNames(prefix string) []string {
	var names []string
	for _, k := range registry {
		switch {
		case prefix == "" && groupOf(k.name) == "":
			names = append(names, k.name)
		case prefix == "" && !slices.Contains(names, groupOf(k.name)):
			names = append(names, groupOf(k.name))
		case prefix != "" && groupOf(k.name) == prefix:
			names = append(names, strings.TrimPrefix(k.name, prefix+"."))
		}
	}
	return names
}

func isGroup(name string) bool {
	for _, k := range registry {
		if groupOf(k.name) == name {
			return true
		}
	}
	return false
}

// KeyInfo documents one configuration key for explain, the schema and the init template.
type KeyInfo struct {
	Key         string   `json:"key"`
	Type        string   `json:"type"`
	Default     string   `json:"default"`
	Description string   `json:"description"`
	Env         string   `json:"env,omitempty"`
	Values      []string `json:"values,omitempty"`
}

// Values lists the values key takes, for a key with a fixed set of them; nil otherwise.
func Values(key string) []string {
	for _, k := range registry {
		if k.name == key {
			return slices.Clone(k.enum)
		}
	}
	return nil
}

// Keys lists every configuration key in a stable order.
func Keys() []KeyInfo {
	var out []KeyInfo
	for _, k := range registry {
		out = append(out, KeyInfo{Key: k.name, Type: k.kind.String(), Default: defaultText(k), Description: k.doc, Env: k.env, Values: k.enum})
	}
	return out
}

// defaultText describes a key's built-in default.
func defaultText(k *keyDef) string {
	if k.defDoc != "" {
		return k.defDoc
	}
	defaults := builtinDefaults()
	return formatValue(k, k.field(&defaults))
}

func (k kind) String() string {
	return [...]string{"string", "bool", "int", "number", "size", "duration", "list", "map", "map", "list", "list"}[k]
}
