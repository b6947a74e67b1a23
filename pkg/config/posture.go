package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/cacerts"
)

// Posture levels: at the safe default, weakened with a stated risk, or dangerous.
const (
	LevelOK     = "ok"
	LevelWeak   = "weakened"
	LevelDanger = "danger"
)

// PostureItem is one protection of the sandbox and how the configuration leaves it.
type PostureItem struct {
	Name   string `json:"name"`
	Level  string `json:"level"`
	Detail string `json:"detail"`
	Risk   string `json:"risk,omitempty"`
	Key    string `json:"key,omitempty"`
	Source Source `json:"-"`
}

// Posture judges each protection of the resolved sandbox; every break-glass switch that is on
// ends the list as a danger with what it unlocks.
func Posture(r *Resolved) []PostureItem {
	c := &r.Config
	var out []PostureItem
	add := func(name, key, level, detail, risk string) {
		out = append(out, PostureItem{Name: name, Level: level, Detail: detail, Risk: risk, Key: key, Source: r.Sources[key]})
	}

	switch {
	case c.Mode == ModeOff:
		add("execution", "mode", LevelDanger, "mode off: every exec runs on the host", "commands run with your user's full access to this machine")
	case r.ExecsOnHost():
		add("execution", "mode", LevelDanger, "mode non-main: this default sandbox's execs run on the host", "commands run with your user's full access to this machine")
	case c.Mode == ModeNonMain:
		add("execution", "mode", LevelWeak, "mode non-main: this named sandbox is isolated, the default one is not", "execs without a name run on the host")
	default:
		add("execution", "mode", LevelOK, "every exec runs in the sandbox", "")
	}
	if c.ReadOnlyRoot {
		add("read-only root", "readOnlyRoot", LevelOK, "the image's files cannot be changed", "")
	} else {
		add("read-only root", "readOnlyRoot", LevelDanger, "the root file system is writable", "code can replace programs in the image that later execs run")
	}
	if len(c.CapAdd) == 0 {
		add("capabilities", "capAdd", LevelOK, "all dropped", "")
	} else {
		add("capabilities", "capAdd", LevelWeak, "all dropped except "+strings.Join(c.CapAdd, ", "), "processes may bind ports below 1024")
	}
	add("no-new-privileges", "", LevelOK, "always on: setuid programs cannot raise privileges", "")

	switch n := c.Network; {
	case n == "none" && len(c.Egress) > 0:
		add("network", "egress", LevelWeak, "none, but sbx's proxy lets it reach "+formatList(c.Egress)+" (no DNS, no other route)",
			"code can download from those destinations and send your project's contents to them")
	case n == "none":
		add("network", "network", LevelOK, "none: loopback only", "")
	case strings.HasPrefix(n, "container:"):
		add("network", "network", LevelDanger, n+": shares that container's network namespace", "the sandbox reaches everything that container can, including its loopback services")
	case n == "bridge" || n == "default":
		detail := "bridge: outbound access, on a network of its own (no other container reaches it)"
		if src := r.Sources["network"]; src.Layer == LayerProfile && src.Name == images.ProfileBrowser {
			detail += " (the browser profile needs it to publish its ports on 127.0.0.1)"
		}
		add("network", "network", LevelWeak, detail, "code can download anything and send your project's contents anywhere")
	default:
		add("network", "network", LevelWeak, n+": a user-defined network", "code can reach whatever that network reaches")
	}
	if c.SeccompProfile == "" {
		add("seccomp", "seccompProfile", LevelOK, "sbx's built-in profile (moby's current default; io_uring blocked)", "")
	} else {
		add("seccomp", "seccompProfile", LevelWeak, "custom profile "+c.SeccompProfile, "only as strict as that file; check it blocks what Docker's default does")
	}
	if c.ApparmorProfile == "" {
		add("apparmor", "apparmorProfile", LevelOK, "the engine's default profile (where AppArmor is enabled)", "")
	} else {
		add("apparmor", "apparmorProfile", LevelWeak, "custom profile "+c.ApparmorProfile, "only as strict as that profile")
	}
	if uid, _, _ := strings.Cut(c.User, ":"); uid == "0" {
		add("user", "user", LevelDanger, "root (uid 0)", "a kernel or runtime bug is one step from root on the host; root can also undo file permissions inside")
	} else {
		add("user", "user", LevelOK, "uid:gid "+c.User+", not root", "")
	}
	limits := fmt.Sprintf("memory %s, cpus %s, %d processes, /dev/shm %s", FormatSize(c.Memory), strconv.FormatFloat(c.CPUs, 'f', -1, 64), c.PidsLimit, FormatSize(c.ShmSize))
	if c.MemorySwap > c.Memory {
		add("limits", "memorySwap", LevelWeak, limits+", swap "+FormatSize(c.MemorySwap-c.Memory), "swap slows the host down before the limit is reached")
	} else {
		add("limits", "memory", LevelOK, limits+", no swap", "")
	}
	if c.Init {
		add("init", "init", LevelOK, "an init process reaps zombies", "")
	} else {
		add("init", "init", LevelWeak, "no init process", "zombies are not reaped; after a fork bomb the sandbox stays unusable")
	}
	switch c.Workspace {
	case WorkspaceRW:
		add("workspace", "workspace", LevelWeak, "project mounted read-write at "+WorkspaceTarget+", protected paths read-only",
			"code can change and delete your project's files, and leave files your tools run: look before you run git or anything else in the project")
	case WorkspaceRO:
		add("workspace", "workspace", LevelOK, "project mounted read-only at "+WorkspaceTarget, "")
	case WorkspaceNone:
		add("workspace", "workspace", LevelOK, "a private volume; no host files", "")
	case WorkspaceOverlay:
		add("workspace", "workspace", LevelOK, "project writable at "+WorkspaceTarget+" through an overlay; the host changes only by sbx apply", "")
	}
	for i, b := range c.Binds {
		key := fmt.Sprintf("binds[%d]", i)
		if b.ReadOnly {
			add("bind", key, LevelOK, b.String()+" (read-only)", "")
		} else {
			add("bind", key, LevelWeak, b.String()+" (read-write)", "code can change the files under "+b.Source)
		}
	}
	switch rt := c.Runtime; {
	case c.Isolation == IsolationGVisor:
		add("isolation", "isolation", LevelOK, "gVisor ("+GVisorRuntime+", ptrace platform): a user-space kernel answers the sandbox's system calls, the host's kernel sees only gVisor's", "")
	case rt == "":
		add("isolation", "isolation", LevelOK, "container: the host's kernel, behind namespaces, seccomp and dropped capabilities (the engine's default runtime, usually runc)", "")
	default:
		// A runtime is a name in the engine's configuration: sbx cannot say what it runs.
		add("isolation", "runtime", LevelOK, "container under the engine's runtime "+rt+" (sbx does not check it; isolation: gvisor is the gVisor sbx checks)", "")
	}
	if c.CACerts != "" {
		add("CA certificates", "caCerts", LevelWeak, "tools trust "+caText(c.CACerts)+" besides the image's own",
			"whoever holds those CAs' keys can read and change the sandbox's HTTPS traffic unnoticed")
	}
	if len(c.PassEnv) == 0 {
		add("host variables", "passEnv", LevelOK, "none of your environment reaches commands", "")
	} else {
		add("host variables", "passEnv", LevelWeak, "every command gets "+strings.Join(c.PassEnv, ", ")+" from your environment",
			"code can read those values and send them wherever it can reach")
	}
	switch t := r.Trust; t.State {
	case TrustNone:
		add("project file", "", LevelOK, "none", "")
	case TrustTrusted:
		if n := len(r.Loosenings); n > 0 {
			add("project file", "", LevelWeak, fmt.Sprintf("%s, trusted: it loosens %d %s", t.File, n, plural(n, "setting")),
				"its author chose them; \"sbx trust --revoke\" takes them back")
		} else {
			add("project file", "", LevelOK, t.File+", trusted; it loosens nothing", "")
		}
	default:
		add("project file", "", LevelOK, t.File+", "+t.State+": it may only tighten the sandbox", "")
	}
	for _, s := range breakGlass(c) {
		add("break-glass", s.key, LevelDanger, s.key+" is on", s.unlocks)
	}
	return out
}

// caText names the CAs a caCerts value adds.
func caText(ca string) string {
	if ca == cacerts.Host {
		return "the CAs added to this machine's system store"
	}
	return "the CAs in " + ca
}

type switchInfo struct{ key, unlocks string }

func breakGlass(c *Config) []switchInfo {
	var out []switchInfo
	if c.DangerouslyAllowExternalBindSources {
		out = append(out, switchInfo{"dangerouslyAllowExternalBindSources", "binds may expose host paths outside the project"})
	}
	if c.DangerouslyAllowReservedTargets {
		out = append(out, switchInfo{"dangerouslyAllowReservedTargets", "binds may cover /workspace and sbx's own paths"})
	}
	if c.DangerouslyAllowContainerNamespaceJoin {
		out = append(out, switchInfo{"dangerouslyAllowContainerNamespaceJoin", "network container:<name> shares another container's network"})
	}
	if c.DangerouslyAllowUnenforcedLimits {
		out = append(out, switchInfo{"dangerouslyAllowUnenforcedLimits", "sandboxes may run without their limits on an engine that does not apply them"})
	}
	return out
}

// Entry is one row of explain's settings table.
type Entry struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source Source `json:"-"`
	// Note describes an empty value: "the engine's default profile".
	Note string `json:"note,omitempty"`
}

// Entries lists every key's value and source in the registry's order. Lists that add up
// across layers and maps get a row per element ("tmpfs[0]", "env.LANG"); secret-looking env
// values are masked.
func (r *Resolved) Entries() []Entry {
	c := &r.Config
	var out []Entry
	row := func(key, value string) {
		out = append(out, Entry{Key: key, Value: value, Source: r.Sources[key]})
	}
	for _, k := range registry {
		ptr := k.field(c)
		switch k.kind {
		case kEnv:
			rows := r.mapRows("env.", *ptr.(*map[string]string))
			if len(rows) == 0 {
				row(k.name, "{}")
			}
			out = append(out, rows...)
		case kUlimits:
			m := map[string]string{}
			for name, u := range *ptr.(*map[string]Ulimit) {
				m[name] = u.String()
			}
			rows := r.mapRows("ulimits.", m)
			if len(rows) == 0 {
				row(k.name, "{}")
			}
			out = append(out, rows...)
		case kTmpfs, kBinds, kStrings:
			if k.kind == kStrings && !k.rows {
				out = append(out, Entry{Key: k.name, Value: formatValue(k, ptr), Source: r.Sources[k.name]})
				continue
			}
			var items []string
			switch k.kind {
			case kStrings:
				items = *ptr.(*[]string)
			case kTmpfs:
				for _, t := range c.Tmpfs {
					items = append(items, t.String())
				}
			case kBinds:
				for _, b := range c.Binds {
					items = append(items, b.String())
				}
			}
			if len(items) == 0 {
				row(k.name, "[]")
			}
			for i, s := range items {
				row(fmt.Sprintf("%s[%d]", k.name, i), s)
			}
		default:
			v := formatValue(k, ptr)
			out = append(out, Entry{Key: k.name, Value: v, Source: r.Sources[k.name]})
			if v == "" {
				out[len(out)-1].Note = k.defDoc
			}
		}
	}
	return out
}

// mapRows renders a map's rows sorted by name, masking secret env values.
func (r *Resolved) mapRows(prefix string, m map[string]string) []Entry {
	var out []Entry
	for _, name := range slices.Sorted(maps.Keys(m)) {
		v := m[name]
		if prefix == "env." {
			v = MaskEnv(name, v)
		}
		out = append(out, Entry{Key: prefix + name, Value: v, Source: r.Sources[prefix+name]})
	}
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
