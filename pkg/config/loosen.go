package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/egress"
)

// Loosening is one setting of the project file that gives the sandbox more than the user's own
// layers (defaults, user file, --config, SBX_* variables, flags) give it. While the file is not
// trusted each one is refused; sbx trust shows them before the user accepts them.
type Loosening struct {
	// Key is where the file sets it: "network", "binds[0]", or "profile" for a value the
	// profile it chose brings.
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source Source `json:"-"`
	// Allows says what the setting would let the sandbox do, or let sbx do on the host.
	Allows string `json:"allows"`
}

// MarshalJSON adds where the file sets it: "source" as explain shows sources, and "line".
func (l Loosening) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Key    string `json:"key"`
		Value  string `json:"value"`
		Source string `json:"source"`
		Line   int    `json:"line"`
		Allows string `json:"allows"`
	}{l.Key, l.Value, l.Source.String(), l.Source.Line, l.Allows})
}

// String renders the loosening for a person: "project:/p/.sbx.yaml:3: network "bridge": ...".
func (l Loosening) String() string {
	return Problem{Key: l.Key, Source: l.Source, Value: l.Value, Reason: l.Allows}.String()
}

// judge compares the configuration with the project file (full) against the one without it
// (base) and collects what the file loosens.
type judge struct {
	base, full *Resolved
	// fromFile reports whether a source is the project file.
	fromFile func(Source) bool
	// profile is the project file's profile entry when it chose the profile.
	profile *Source
	file    string
	out     []Loosening
}

// looseningRules judge each key; every key of the registry has one (TestEveryKeyIsJudged), so
// a new key must say whether and when it loosens. never marks a key that cannot loosen.
var looseningRules = map[string]func(j *judge){
	"mode": func(j *judge) {
		if m := j.full.Config.Mode; m != ModeAll && m != j.base.Config.Mode {
			j.add("mode", m, "runs commands on the host, as you, with your whole environment")
		}
	},
	"profile": never, // judged through the values it brings
	"image": func(j *judge) {
		if img := j.full.Config.Image; img != j.base.Config.Image && !isBundledImage(img) {
			j.add("image", img, "runs an image sbx did not build; when it is missing, sbx pulls it from its registry with your registry credentials")
		}
	},
	"workspace": func(j *judge) {
		if j.full.Config.Workspace == WorkspaceRW && j.base.Config.Workspace != WorkspaceRW {
			j.add("workspace", WorkspaceRW, "lets the sandbox change and delete the project's files on the host")
		}
	},
	"workdir": never,
	"user": func(j *judge) {
		u := j.full.Config.User
		// In rw mode the user follows the workspace, which is judged itself.
		if u == j.base.Config.User || j.full.Sources["user"].IsDefault() {
			return
		}
		if uid, _, _ := strings.Cut(u, ":"); uid == "0" {
			j.add("user", u, "runs the sandbox as root")
		} else {
			j.add("user", u, "runs the sandbox as uid:gid "+u+" instead of "+j.base.Config.User+", which may own host files in the workspace")
		}
	},
	"readOnlyRoot": func(j *judge) {
		if !j.full.Config.ReadOnlyRoot && j.base.Config.ReadOnlyRoot {
			j.add("readOnlyRoot", "false", "makes the image's files writable, so code can replace the programs later commands run")
		}
	},
	"tmpfs": func(j *judge) {
		ceiling := j.base.Config.Limits.TmpfsSize
		for i, t := range j.full.Config.Tmpfs {
			key := fmt.Sprintf("tmpfs[%d]", i)
			old, had := tmpfsAt(j.base.Config.Tmpfs, t.Path)
			// A bundled profile's exec home is sbx's own setting: its toolchains run what they build.
			if t.allowsExec() && (!had || !old.allowsExec()) && j.full.Sources[key].Layer != LayerProfile {
				j.add(key, t.String(), "allows running programs written to "+t.Path)
			}
			if size := t.size(); size > max(ceiling, old.size()) {
				j.add(key, t.String(), "asks for "+FormatSize(size)+" at "+t.Path+", above limits.tmpfsSize ("+FormatSize(ceiling)+")")
			}
		}
	},
	"network": func(j *judge) {
		if n := j.full.Config.Network; n != j.base.Config.Network && n != "none" {
			j.add("network", n, "gives the sandbox network access: code can download anything and send the project's contents anywhere")
		}
	},
	"capDrop": func(j *judge) {
		for _, c := range j.base.Config.CapDrop {
			if !slices.Contains(j.full.Config.CapDrop, c) {
				j.add("capDrop", formatList(j.full.Config.CapDrop), "keeps capability "+c)
			}
		}
	},
	"capAdd": func(j *judge) {
		for i, c := range j.full.Config.CapAdd {
			if !slices.Contains(j.base.Config.CapAdd, c) {
				j.add(fmt.Sprintf("capAdd[%d]", i), c, "gives back capability "+c)
			}
		}
	},
	"init": func(j *judge) {
		if !j.full.Config.Init && j.base.Config.Init {
			j.add("init", "false", "runs without an init process: after a fork bomb the sandbox stays full of zombies")
		}
	},
	"memory": func(j *judge) {
		ceiling(j, "memory", j.full.Config.Memory, j.base.Config.Memory, j.base.Config.Limits.Memory, "limits.memory", FormatSize)
	},
	"memorySwap": func(j *judge) {
		c, b := &j.full.Config, &j.base.Config
		if swap := c.MemorySwap - c.Memory; swap > b.MemorySwap-b.Memory {
			j.add("memorySwap", FormatSize(c.MemorySwap), "lets the sandbox swap "+FormatSize(swap))
		}
	},
	"shmSize": func(j *judge) {
		ceiling(j, "shmSize", j.full.Config.ShmSize, j.base.Config.ShmSize, j.base.Config.Limits.Memory, "limits.memory", FormatSize)
	},
	"cpus": func(j *judge) {
		ceiling(j, "cpus", j.full.Config.CPUs, j.base.Config.CPUs, j.base.Config.Limits.CPUs, "limits.cpus", formatFloat)
	},
	"pidsLimit": func(j *judge) {
		ceiling(j, "pidsLimit", j.full.Config.PidsLimit, j.base.Config.PidsLimit, j.base.Config.Limits.PidsLimit, "limits.pidsLimit", formatInt)
	},
	"ulimits": func(j *judge) {
		full, base := j.full.Config.Ulimits, j.base.Config.Ulimits
		for _, name := range slices.Sorted(maps.Keys(base)) {
			if _, ok := full[name]; !ok {
				j.add("ulimits", formatValue(lookupKey("ulimits"), &full), "drops the "+name+" limit, leaving the engine's default")
			}
		}
		for _, name := range slices.Sorted(maps.Keys(full)) {
			u := full[name]
			old, ok := base[name]
			switch {
			case !ok:
				j.add("ulimits."+name, u.String(), "sets the "+name+" limit, which may be above the engine's default")
			case u.Soft > old.Soft || u.Hard > old.Hard:
				j.add("ulimits."+name, u.String(), "raises the "+name+" limit above "+old.String())
			}
		}
	},
	"timeout": func(j *judge) {
		t, b := j.full.Config.Timeout, j.base.Config.Timeout
		if t == 0 && b != 0 {
			j.add("timeout", "0", "lets commands run with no time limit")
			return
		}
		ceiling(j, "timeout", t, b, j.base.Config.Limits.Timeout, "limits.timeout", FormatDuration)
	},
	"maxRunning": func(j *judge) {
		if n := j.full.Config.MaxRunning; n != j.base.Config.MaxRunning {
			j.add("maxRunning", strconv.Itoa(n), "decides how many of your sandboxes may run, pausing or stopping other projects' sandboxes")
		}
	},
	"pool": func(j *judge) {
		if n := j.full.Config.Pool; n > j.base.Config.Pool {
			j.add("pool", strconv.Itoa(n), "keeps "+strconv.Itoa(n)+" started sandboxes running on this machine, using its memory while idle")
		}
	},
	"evict": func(j *judge) {
		if e := j.full.Config.Evict; e != j.base.Config.Evict {
			j.add("evict", e, "decides what happens to other projects' sandboxes when too many run")
		}
	},
	"env": never, // variables live inside the sandbox; secret-looking ones are refused anyway
	"passEnv": func(j *judge) {
		for i, name := range j.full.Config.PassEnv {
			if !slices.Contains(j.base.Config.PassEnv, name) {
				j.add(fmt.Sprintf("passEnv[%d]", i), name, "hands your "+name+" variable to every command in the sandbox")
			}
		}
	},
	"binds": func(j *judge) {
		for i, b := range j.full.Config.Binds {
			if slices.Contains(j.base.Config.Binds, b) {
				continue
			}
			access := "read-write"
			if b.ReadOnly {
				access = "read-only"
			}
			j.add(fmt.Sprintf("binds[%d]", i), b.String(), "mounts the host path "+b.Source+" into the sandbox, "+access)
		}
	},
	"seccompProfile": func(j *judge) {
		if p := j.full.Config.SeccompProfile; p != j.base.Config.SeccompProfile {
			j.add("seccompProfile", p, "replaces sbx's system-call filter with whatever "+p+" allows")
		}
	},
	"apparmorProfile": func(j *judge) {
		if p := j.full.Config.ApparmorProfile; p != j.base.Config.ApparmorProfile {
			j.add("apparmorProfile", p, "replaces the engine's AppArmor profile with "+p)
		}
	},
	"isolation": func(j *judge) {
		// gvisor only adds a kernel of its own; container asks for less than the user's gvisor.
		if iso := j.full.Config.Isolation; iso != j.base.Config.Isolation && iso != IsolationGVisor {
			j.add("isolation", iso, "runs the sandbox on the host's kernel instead of gVisor's, which your own settings ask for")
		}
	},
	"runtime": func(j *judge) {
		// A runtime is only a name in the engine's configuration ("runsc" may run anything
		// there) and sbx checks none of them: the one sbx verifies is isolation: gvisor's.
		if rt := j.full.Config.Runtime; rt != j.base.Config.Runtime {
			j.add("runtime", rt, "runs the sandbox under the engine's runtime "+rt+", which sbx does not check (for gVisor, isolation: gvisor uses sbx's own registration, checked at create)")
		}
	},

	"caCerts": func(j *judge) {
		if ca := j.full.Config.CACerts; ca != "" && ca != j.base.Config.CACerts {
			j.add("caCerts", ca, "makes the sandbox's tools trust "+caText(ca)+": whoever holds those CAs' keys can read and change its HTTPS traffic unnoticed")
		}
	},
	"egress": func(j *judge) {
		// Judged by rule, presets expanded, so a file cannot hide a new host in a preset the
		// user's own list does not name; a list that does not expand is refused by validation.
		base, _ := egress.Expand(j.base.Config.Egress)
		had := map[string]bool{}
		for _, r := range base {
			had[r.Text] = true
		}
		for i, text := range j.full.Config.Egress {
			rules, _ := egress.Expand([]string{text})
			var added []string
			for _, r := range rules {
				if !had[r.Text] {
					added = append(added, r.Text)
				}
			}
			if len(added) > 0 {
				j.add(fmt.Sprintf("egress[%d]", i), text, "lets the sandbox reach "+strings.Join(added, ", ")+" through sbx's proxy: code can download from there and send the project's contents there")
			}
		}
	},
	"dns": func(j *judge) {
		for i, d := range j.full.Config.DNS {
			if !slices.Contains(j.base.Config.DNS, d) {
				j.add(fmt.Sprintf("dns[%d]", i), d, "sends the sandbox's name lookups to "+d)
			}
		}
	},
	"extraHosts": func(j *judge) {
		for i, h := range j.full.Config.ExtraHosts {
			if !slices.Contains(j.base.Config.ExtraHosts, h) {
				j.add(fmt.Sprintf("extraHosts[%d]", i), h, "points a host name at an address of the file's choosing")
			}
		}
	},
	"idleStop": func(j *judge) {
		// Stopping drops what the sandbox holds in memory and tmpfs (its /tmp): as prune rules,
		// only the user's own settings may make it come sooner.
		v, b := j.full.Config.IdleStop, j.base.Config.IdleStop
		if v != b && v != 0 && (b == 0 || v < b) {
			j.add("idleStop", FormatDuration(v), "stops the sandbox, dropping its /tmp and processes' memory, sooner than your settings do")
		}
	},
	"prune.idleHours": func(j *judge) {
		j.prune("prune.idleHours", j.full.Config.Prune.IdleHours, j.base.Config.Prune.IdleHours)
	},
	"prune.maxAgeDays": func(j *judge) {
		j.prune("prune.maxAgeDays", j.full.Config.Prune.MaxAgeDays, j.base.Config.Prune.MaxAgeDays)
	},
	// What setup installs runs as root in the image's build, with network through the egress
	// allowlist, and its results run in every later sandbox: any change the file makes loosens.
	"setup.apt": func(j *judge) {
		j.setup("setup.apt", j.full.Config.Setup.Apt, j.base.Config.Setup.Apt, "installs Debian packages as root into the image the sandbox runs; their install scripts run with network access")
	},
	"setup.npm": func(j *judge) {
		j.setup("setup.npm", j.full.Config.Setup.Npm, j.base.Config.Setup.Npm, "installs npm packages as root into the image the sandbox runs; their install scripts run with network access")
	},
	"setup.pip": func(j *judge) {
		j.setup("setup.pip", j.full.Config.Setup.Pip, j.base.Config.Setup.Pip, "installs pip packages as root into the image the sandbox runs; their build scripts run with network access")
	},
	"setup.run": func(j *judge) {
		j.setup("setup.run", j.full.Config.Setup.Run, j.base.Config.Setup.Run, "runs these commands as root while building the image the sandbox runs, with network access")
	},
	"tools.allow": func(j *judge) { // and tools.deny: judged by their decisions
		for _, tool := range ToolNames {
			d := j.full.DecideTool(tool)
			if !d.Allowed || j.base.DecideTool(tool).Allowed {
				continue
			}
			key, value := d.Key, d.Rule
			if key == "" { // an empty allow list allows what no deny rule matches
				key, value = "tools.deny", formatList(j.full.Config.Tools.Deny)
			}
			j.add(key, value, "allows the "+tool+" tool, which your own settings deny")
		}
	},
	"tools.deny": never, // with tools.allow
	"protectedPaths": func(j *judge) {
		if dropped := droppedFrom(j.base.Config.ProtectedPaths, j.full.Config.ProtectedPaths); len(dropped) > 0 {
			j.add("protectedPaths", formatList(j.full.Config.ProtectedPaths), "lets a rw sandbox write "+strings.Join(dropped, ", ")+", which tools on the host obey")
		}
	},
	"workspaceExclude": func(j *judge) {
		if dropped := droppedFrom(j.base.Config.WorkspaceExclude, j.full.Config.WorkspaceExclude); len(dropped) > 0 {
			j.add("workspaceExclude", formatList(j.full.Config.WorkspaceExclude), "copies "+strings.Join(dropped, ", ")+" to a remote engine, which your own settings leave out")
		}
	},
	"limits.memory": func(j *judge) {
		j.raised("limits.memory", j.full.Config.Limits.Memory > j.base.Config.Limits.Memory, FormatSize(j.full.Config.Limits.Memory))
	},
	"limits.cpus": func(j *judge) {
		j.raised("limits.cpus", j.full.Config.Limits.CPUs > j.base.Config.Limits.CPUs, formatFloat(j.full.Config.Limits.CPUs))
	},
	"limits.pidsLimit": func(j *judge) {
		j.raised("limits.pidsLimit", j.full.Config.Limits.PidsLimit > j.base.Config.Limits.PidsLimit, formatInt(j.full.Config.Limits.PidsLimit))
	},
	"limits.tmpfsSize": func(j *judge) {
		j.raised("limits.tmpfsSize", j.full.Config.Limits.TmpfsSize > j.base.Config.Limits.TmpfsSize, FormatSize(j.full.Config.Limits.TmpfsSize))
	},
	"limits.timeout": func(j *judge) {
		j.raised("limits.timeout", j.full.Config.Limits.Timeout > j.base.Config.Limits.Timeout, FormatDuration(j.full.Config.Limits.Timeout))
	},
	"dangerouslyAllowExternalBindSources":    breakGlassRule("dangerouslyAllowExternalBindSources", "lets binds expose host paths outside the project"),
	"dangerouslyAllowReservedTargets":        breakGlassRule("dangerouslyAllowReservedTargets", "lets binds cover /workspace and sbx's own paths"),
	"dangerouslyAllowContainerNamespaceJoin": breakGlassRule("dangerouslyAllowContainerNamespaceJoin", "lets the sandbox share another container's network"),
	"dangerouslyAllowUnenforcedLimits":       breakGlassRule("dangerouslyAllowUnenforcedLimits", "lets sandboxes run without memory, CPU and pids limits on an engine that does not apply them"),
}

func never(*judge) {}

func breakGlassRule(key, allows string) func(*judge) {
	return func(j *judge) {
		on := *lookupKey(key).field(&j.full.Config).(*bool)
		was := *lookupKey(key).field(&j.base.Config).(*bool)
		if on && !was {
			j.add(key, "true", allows)
		}
	}
}

// ceiling refuses a value above both the user's ceiling and what the user's own layers set.
func ceiling[T int64 | float64 | time.Duration](j *judge, key string, v, base, limit T, limitKey string, format func(T) string) {
	if v > max(limit, base) {
		j.add(key, format(v), "asks for more than "+limitKey+" ("+format(limit)+") allows an untrusted file")
	}
}

func (j *judge) prune(key string, v, base int) {
	// 0 turns a rule off, which removes nothing; any other value below the user's removes sooner.
	if v != base && v != 0 && (base == 0 || v < base) {
		j.add(key, strconv.Itoa(v), "makes sbx prune remove sandboxes sooner than your settings do")
	}
}

func (j *judge) setup(key string, v, base []string, allows string) {
	if !slices.Equal(v, base) {
		j.add(key, formatList(v), allows)
	}
}

func (j *judge) raised(key string, raised bool, value string) {
	if raised {
		j.add(key, value, "raises a ceiling that only your own settings may raise")
	}
}

// add records a loosening of key, attributed to the line of the project file that caused it:
// the key's own, or the profile's when the value came with the profile the file chose.
func (j *judge) add(key, value, allows string) {
	src := j.full.Sources[key]
	if _, ok := j.full.Sources[key]; !ok {
		src = j.full.Sources[groupKey(key)]
	}
	switch {
	case j.fromFile(src):
	case src.Layer == LayerProfile && j.profile != nil:
		allows = "brings " + key + ": " + value + ", which " + allows
		key, value, src = "profile", src.Name, *j.profile
	default:
		src = Source{Layer: LayerProject, File: j.file}
	}
	for _, l := range j.out {
		if l.Key == key && l.Source == src && l.Allows == allows {
			return
		}
	}
	j.out = append(j.out, Loosening{Key: key, Value: value, Source: src, Allows: allows})
}

// groupKey is the key of a list or map element: "binds" for "binds[0]", "ulimits" for "ulimits.nofile".
func groupKey(key string) string {
	if i := strings.IndexByte(key, '['); i > 0 {
		return key[:i]
	}
	if strings.HasPrefix(key, "ulimits.") || strings.HasPrefix(key, "env.") {
		return key[:strings.IndexByte(key, '.')]
	}
	return key
}

func tmpfsAt(ts []Tmpfs, path string) (Tmpfs, bool) {
	for _, t := range ts {
		if t.Path == path {
			return t, true
		}
	}
	return Tmpfs{}, false
}

func (t Tmpfs) allowsExec() bool { return slices.Contains(t.Options, "exec") }

// size is the tmpfs's size option in bytes, 0 when it has none (validation refuses that).
func (t Tmpfs) size() int64 {
	for _, o := range t.Options {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			n, _ := ParseSize(v)
			return n
		}
	}
	return 0
}

func formatList(l []string) string { return "[" + strings.Join(l, ", ") + "]" }
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
func formatInt(n int64) string     { return strconv.FormatInt(n, 10) }

// droppedFrom lists the entries of base that full lacks: a list whose entries each tighten
// is loosened by exactly those.
func droppedFrom(base, full []string) []string {
	var dropped []string
	for _, p := range base {
		if !slices.Contains(full, p) {
			dropped = append(dropped, p)
		}
	}
	return dropped
}
